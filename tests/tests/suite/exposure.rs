//! Warnings an admin can act on (issue 27, item 4): a project in a developer's home, with tools
//! that run as its owner (`run_as = { owner_of = "working_dir" }`), passes
//! `policy check --deny-warnings` and reloads without a warning, because the only account
//! besides root that can replace its paths is the one the tools run as. A third account able to
//! write a parent still warns, naming the action (`chmod go-w`, `chown root`) and the
//! `accept_warnings` entry that accepts the risk with a reason; accepting it silences the
//! warning and `cordon tool NAME` shows the reason. Needs root (a test user, chown); skips
//! otherwise.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use cordon_tests::agent::{self, AGENT, SOCKET_GROUP};
use cordon_tests::{Daemon, bin, require_root};

const ATTACK: &str = env!("CARGO_BIN_EXE_cordon-attack");

fn q(s: impl AsRef<Path>) -> String {
    serde_json::to_string(s.as_ref().to_str().unwrap()).unwrap()
}

/// `home/dev/proj` (with `src` and `target`) under a root-owned 0755 area; `dev` and below are
/// the agent's.
struct Home {
    _area: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
    dev: PathBuf,
    proj: PathBuf,
}

impl Home {
    fn new() -> Home {
        let area = tempfile::Builder::new().prefix("cordon-home-").tempdir().unwrap();
        let root = area.path().to_path_buf();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        let home = root.join("home");
        let dev = home.join("dev");
        let proj = dev.join("proj");
        std::fs::create_dir_all(proj.join("src")).unwrap();
        std::fs::create_dir_all(proj.join("target")).unwrap();
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).unwrap();
        let ok = Command::new("chown").args(["-R", &format!("{AGENT}:{AGENT}")]).arg(&dev).status().unwrap();
        assert!(ok.success());
        Home { _area: area, root, home, dev, proj }
    }

    /// A template-like policy: project tools run as the project's owner, one builds into
    /// `target`, one reads `src`; `extra` goes into the builder's table.
    fn policy(&self, extra: &str) -> String {
        let keys = |more: &str| {
            format!(
                "exec = [{}]\ntimeout = \"5s\"\nallow = {{ users = [\"{AGENT}\"] }}\n{more}",
                q(Path::new(ATTACK).parent().unwrap())
            )
        };
        let mut builder = cordon_tests::attack_tool(
            "builder",
            Path::new(ATTACK),
            &keys(&format!("write = [{}]", q(self.proj.join("target")))),
        );
        if !extra.is_empty() {
            builder = builder.replace("accept_warnings = [\"leading-dash\"]", extra);
        }
        format!(
            "version = 1\n\n[defaults]\nworking_dir = {}\nrun_as = {{ owner_of = \"working_dir\" }}\nread = [{}]\n{}{}",
            q(&self.proj),
            q(&self.proj),
            builder,
            cordon_tests::attack_tool(
                "linter",
                Path::new(ATTACK),
                &keys(&format!("read = [{}]", q(self.proj.join("src"))))
            ),
        )
    }

    fn write(&self, policy: &str) -> PathBuf {
        let file = self.root.join("proj.toml");
        std::fs::write(&file, policy).unwrap();
        file
    }
}

/// `cordon policy check [--deny-warnings] FILE`: exit code and stderr.
fn check(file: &Path, deny: bool) -> (Option<i32>, String) {
    let mut c = Command::new(bin("cordon"));
    c.args(["policy", "check"]);
    if deny {
        c.arg("--deny-warnings");
    }
    let out = c.arg(file).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn daemon(h: &Home, policy: &str) -> Daemon {
    let policies = h.root.join("policies");
    std::fs::create_dir_all(&policies).unwrap();
    std::fs::write(policies.join("proj.toml"), policy).unwrap();
    let dir = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    Daemon::start_in(dir, policies, &["--socket-group", SOCKET_GROUP])
}

#[test]
fn a_project_in_its_owners_home_with_tools_run_as_the_owner_has_no_warnings() {
    require_root!("to create a test user and chown test directories");
    let h = Home::new();
    let policy = h.policy("");
    let (code, stderr) = check(&h.write(&policy), true);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    // Loading and reloading in cordond: no warning either.
    let d = daemon(&h, &policy);
    let reload = d.cordon(&["reload"]);
    reload.assert_code(0);
    assert!(!reload.stdout.contains("warning") && !reload.stderr.contains("warning"), "{reload:?}");
    let log = d.log_text();
    assert!(!log.contains("can be replaced") && !log.contains("lies beneath"), "{log}");
    // Both callers run it.
    let call = serde_json::json!({ "attack": "write", "a": h.proj.join("target/x").to_str().unwrap() }).to_string();
    d.cordon(&["run", "builder", "--args-json", &call]).assert_code(0);
    agent::cordon(&d.socket, &["run", "builder", "--args-json", &call]).assert_code(0);
}

#[test]
fn a_third_account_that_can_write_a_parent_still_warns_with_the_action_and_the_accept_key() {
    require_root!("to create a test user and chown test directories");
    let h = Home::new();
    let nobody = agent::id("-u", "nobody");
    for (setup, weak, action) in [
        (
            format!("chmod 0777 {}", h.home.display()),
            format!("{} (mode 777) is writable by everyone", h.home.display()),
            format!("`chmod go-w {}`", h.home.display()),
        ),
        (
            format!("chmod 0755 {0} && chown nobody {0}", h.home.display()),
            format!("{} is owned by uid {nobody}", h.home.display()),
            format!("`chown root {}`", h.home.display()),
        ),
    ] {
        assert!(Command::new("sh").args(["-ec", &setup]).status().unwrap().success());
        let uid = agent::id("-u", AGENT);
        let file = h.write(&h.policy(""));
        let (code, stderr) = check(&file, true);
        assert_ne!(code, Some(0), "{stderr}");
        let expected = format!(
            "warning: tool \"builder\": write path {} can be replaced by someone other than root and uid {uid} the \
             tool runs as: {weak}; {action}, or accept it with accept_warnings = [{{ lint = \"replaceable\", reason = \
             \"...\" }}]",
            h.proj.join("target").display()
        );
        assert!(stderr.contains(&expected), "{stderr}\nexpected: {expected}");
        // Without --deny-warnings it is a warning, not an error.
        assert_eq!(check(&file, false).0, Some(0));

        // Accepted without a reason: an error that says how.
        let (code, stderr) = check(&h.write(&h.policy("accept_warnings = [\"leading-dash\", \"replaceable\"]")), false);
        assert_ne!(code, Some(0), "{stderr}");
        assert!(
            stderr.contains(
                "accepting \"replaceable\" needs a reason: accept_warnings = [{ lint = \"replaceable\", reason = "
            ),
            "{stderr}"
        );
        // Accepted with a reason: the builder is silent; the linter (not accepting) still warns.
        let accepted = h.policy(
            "accept_warnings = [\"leading-dash\", { lint = \"replaceable\", reason = \"lab machine: /home is shared, reviewed\" }]",
        );
        let (_, stderr) = check(&h.write(&accepted), false);
        assert!(!stderr.contains("tool \"builder\""), "{stderr}");
        assert!(stderr.contains("warning: tool \"linter\": read path"), "{stderr}");
        // And `cordon tool NAME` shows what was accepted, with the reason.
        let d = daemon(&h, &accepted);
        let shown = d.cordon(&["tool", "builder"]);
        assert!(shown.stdout.contains("replaceable: lab machine: /home is shared, reviewed"), "{}", shown.stdout);
        let json = d.cordon(&["tool", "builder", "--json"]).json();
        assert!(json.to_string().contains("replaceable: lab machine: /home is shared, reviewed"), "{json:#}");
        drop(d);
        let _ = std::fs::remove_dir_all(h.root.join("policies"));
    }
    let _ = h.dev;
}

/// Another tool's write root above a path warns only when that tool runs as someone else than
/// this one: two tools of the owner's project share the owner's rights.
#[test]
fn a_write_root_of_a_tool_run_as_the_same_owner_is_no_warning_and_one_run_as_its_caller_is() {
    require_root!("to create a test user and chown test directories");
    let h = Home::new();
    let fmt_tool = |name: &str, extra: &str| {
        cordon_tests::attack_tool(
            name,
            Path::new(ATTACK),
            &format!(
                "exec = [{}]\ntimeout = \"5s\"\nwrite = [{}]\n{extra}",
                q(Path::new(ATTACK).parent().unwrap()),
                q(&h.proj)
            ),
        )
    };
    let same = format!("{}{}", h.policy(""), fmt_tool("formatter", ""));
    let (code, stderr) = check(&h.write(&same), true);
    assert_eq!(code, Some(0), "{stderr}");

    // The formatter runs as its caller (root, for a root caller): the linter's src is exposed.
    let other = same.replace("[tools.formatter]", "[tools.formatter]\nrun_as = \"nobody\"");
    let (code, stderr) = check(&h.write(&other), true);
    assert_ne!(code, Some(0), "{stderr}");
    let expected = format!(
        "warning: tool \"linter\": read path {} lies beneath {}, a write root of tool \"formatter\"",
        h.proj.join("src").display(),
        h.proj.display()
    );
    assert!(stderr.contains(&expected), "{stderr}");
    assert!(
        stderr.contains("narrow that write root or move this path out of it, or run both tools as one account (run_as), or accept it with accept_warnings = [{ lint = \"beneath-write-root\", reason = \"...\" }]"),
        "{stderr}"
    );
}

/// The starter `make-test` shape: a tool run as its caller with a write root over all of `/home`.
/// A caller writes there with its own rights, so a project its owner alone can write is not
/// exposed by it; once another account may write a directory in between, it is.
#[test]
fn a_write_root_of_a_tool_run_as_its_caller_exposes_only_what_others_may_write() {
    require_root!("to create a test user and chown test directories");
    let h = Home::new();
    let dir = h.root.join("policies-dir");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("proj.toml"), h.policy("")).unwrap();
    let team = format!(
        "version = 1\n\n{}",
        cordon_tests::attack_tool(
            "make-test",
            Path::new(ATTACK),
            &format!(
                "exec = [{}]\ntimeout = \"5s\"\nwrite = [{}]\nallow = {{ users = [\"{AGENT}\"] }}",
                q(Path::new(ATTACK).parent().unwrap()),
                q(&h.home)
            ),
        )
    );
    std::fs::write(dir.join("team.toml"), team).unwrap();
    let (code, stderr) = check(&dir, true);
    assert_eq!(code, Some(0), "the owner's own tree is no one else's to change: {stderr}");
    assert!(!stderr.contains("lies beneath"), "{stderr}");

    // A group-writable directory between the root and the linter's src: its group may write there.
    std::fs::set_permissions(&h.proj, std::fs::Permissions::from_mode(0o775)).unwrap();
    let (code, stderr) = check(&dir, true);
    assert_ne!(code, Some(0), "{stderr}");
    let expected = format!(
        "warning: tool \"linter\": read path {} lies beneath {}, a write root of tool \"make-test\"",
        h.proj.join("src").display(),
        h.home.display()
    );
    assert!(stderr.contains(&expected), "{stderr}");
}

/// `accept_warnings` is a review of one tool: in `[defaults]` it is an error that says why and
/// what to do, and it silences nothing; on the tool it is accepted.
#[test]
fn accept_warnings_in_defaults_is_an_error_that_says_to_set_it_on_each_tool() {
    require_root!("to create a test user and chown test directories");
    let h = Home::new();
    assert!(Command::new("chmod").arg("0777").arg(&h.home).status().unwrap().success());
    let accept = "accept_warnings = [\"leading-dash\", { lint = \"replaceable\", reason = \"lab machine, reviewed\" }]";
    let in_defaults = h.policy("").replacen("[defaults]\n", &format!("[defaults]\n{accept}\n"), 1);
    let (code, stderr) = check(&h.write(&in_defaults), false);
    assert_eq!(code, Some(65), "{stderr}");
    assert!(
        stderr.contains("`accept_warnings` cannot be set in [defaults]; set it on each tool (accepting a warning is a review of one tool"),
        "{stderr}"
    );
    // On the tool: accepted there, and only there.
    let (code, stderr) = check(&h.write(&h.policy(accept)), false);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("tool \"builder\"") && stderr.contains("warning: tool \"linter\""), "{stderr}");
}
