//! `cordon policy replay` over a real audit log: the real cordond decides a known set of calls
//! (as root and as the agent user: allowed, invalid, denied, confirmed, with a secret), its log
//! (rotated into several files) is copied and replayed against edited copies of the policy, with
//! exact flip counts (a removed user, a narrowed pattern, a removed grant, an added
//! confirmation; a `hosts` tool's own log with a removed and an added host); then the attacks
//! on the evidence: an edited line, a deleted middle file, a forged huge line, each exit 2
//! naming what is wrong, and a secret never in a report.
//! Needs root (the agent user; the egress test also curl); skips otherwise.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use cordon_tests::agent::{self, AGENT, SOCKET_GROUP};
use cordon_tests::{Daemon, Output, cordon_at, eventually, require_root};
use serde_json::{Value, json};

const POLICY: &str = r#"version = 1

[tools.echo]
description = "print the text"
reason = "tests"
command = ["/usr/bin/printf", "[%s]", "{{text}}"]
allow = { users = ["cordon-t-agent"] }

[tools.echo.params.text]
type = "string"
pattern = "^[a-z]+$"
required = true

[tools.login]
description = "takes a secret"
reason = "tests"
command = ["/usr/bin/printf", "%s:%s", "{{user}}", "{{password}}"]
allow = { users = ["cordon-t-agent"] }

[tools.login.params.user]
type = "string"
pattern = "^[a-z]+$"
required = true

[tools.login.params.password]
type = "string"
pattern = "^[a-z0-9]+$"
secret = true
required = true

[tools.guarded]
description = "print, after an agent confirmation"
reason = "tests"
command = ["/usr/bin/printf", "ok"]
confirm = "agent"

[tools.hidden]
description = "no allow: admins only"
reason = "tests"
command = ["/usr/bin/printf", "hidden"]

[tools.cat-file]
description = "print a file of a granted tree"
reason = "tests"
command = ["/bin/cat", "--", "{{file}}"]
read = ["/etc/hostname"]

[tools.cat-file.params.file]
type = "path"
required = true
"#;

/// How many calls of `cat-file` the log records.
const CAT_FILE_CALLS: usize = 2;

/// The secret the calls send; it must appear in no record and no report.
const SECRET: &str = "hunter2secret";

/// The log of the calls, copied once (the daemon stopped), shared by every test of the file.
struct Evidence {
    _dir: tempfile::TempDir,
    /// The copied live log (its rotated siblings beside it).
    log: PathBuf,
    records: Vec<Value>,
}

fn evidence() -> &'static Evidence {
    static EVIDENCE: OnceLock<Evidence> = OnceLock::new();
    EVIDENCE.get_or_init(make_evidence)
}

fn make_evidence() -> Evidence {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), POLICY).unwrap();
    let d = Daemon::start_in(
        dir,
        policies,
        &["--socket-group", SOCKET_GROUP, "--audit-max-size", "2KiB", "--audit-keep", "100"],
    );
    let agent_run =
        |tool: &str, args: Value| agent::cordon(&d.socket, &["run", tool, "--args-json", &args.to_string(), "--json"]);
    // As root (an admin): allowed, invalid, a secret, a confirmed call.
    d.run_json("echo", &json!({ "text": "hi" })).0.assert_code(0);
    d.run_json("echo", &json!({ "text": "HI" })).0.assert_code(65);
    d.run_json("login", &json!({ "user": "zelda", "password": SECRET })).0.assert_code(0);
    let (_, j) = d.run_json("guarded", &json!({}));
    let token = j["confirmation_required"]["token"].as_str().unwrap().to_string();
    d.cordon(&["confirm", &token, "--json"]).assert_code(0);
    // A path argument inside the tool's read grant, twice.
    for _ in 0..CAT_FILE_CALLS {
        d.run_json("cat-file", &json!({ "file": "/etc/hostname" })).0.assert_code(0);
    }
    // As the agent: three allowed, one invalid, one denied.
    agent_run("echo", json!({ "text": "abc" })).assert_code(0);
    agent_run("echo", json!({ "text": "abc" })).assert_code(0);
    agent_run("echo", json!({ "text": "xyz" })).assert_code(0);
    agent_run("echo", json!({ "text": "B4D" })).assert_code(65);
    let denied = agent_run("hidden", json!({}));
    assert_ne!(denied.code, Some(0), "{denied:?}");
    let mut records = Vec::new();
    let all = eventually(Duration::from_secs(10), || {
        records = all_records(&d.audit);
        let n = |what: &str| records.iter().filter(|r| r["decision"] == what).count();
        (n("started"), n("invalid"), n("denied")) == (6 + CAT_FILE_CALLS, 2, 1)
    });
    assert!(all, "{records:#?}");
    // Stopped, so the copy is the whole log.
    let audit_dir = d.audit.parent().unwrap().to_path_buf();
    let name = d.audit.file_name().unwrap().to_owned();
    let mut d = d;
    d.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(d.wait_exit(Duration::from_secs(10)).is_some(), "cordond did not stop");
    let copy = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&audit_dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name().to_string_lossy().starts_with(&*name.to_string_lossy()) {
            std::fs::copy(entry.path(), copy.path().join(entry.file_name())).unwrap();
        }
    }
    drop(d);
    let log = copy.path().join(&name);
    let records = all_records(&log);
    Evidence { _dir: copy, log, records }
}

/// Every record of a log and its rotated files, in seq order.
fn all_records(log: &Path) -> Vec<Value> {
    let mut files = rotated(log);
    files.push(log.to_path_buf());
    files.iter().flat_map(|f| cordon_tests::audit_records(f)).collect()
}

/// The rotated files of `log`, oldest first.
fn rotated(log: &Path) -> Vec<PathBuf> {
    let name = log.file_name().unwrap().to_string_lossy().into_owned();
    let mut out: Vec<(u64, PathBuf)> = std::fs::read_dir(log.parent().unwrap())
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let n = e.file_name().to_string_lossy().strip_prefix(&format!("{name}."))?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    out.sort();
    out.into_iter().map(|(_, p)| p).collect()
}

/// A candidate policy directory holding `text`.
fn candidate(text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("t.toml"), text).unwrap();
    dir
}

fn replay(log: &Path, against: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["policy", "replay", "--audit", log.to_str().unwrap(), "--against", against.to_str().unwrap()];
    args.extend_from_slice(extra);
    cordon_at(Path::new("/nonexistent"), &args)
}

fn replay_json(against: &str) -> (Output, Value) {
    let dir = candidate(against);
    let out = replay(&evidence().log, dir.path(), &["--json"]);
    let json = out.json();
    (out, json)
}

fn flips(report: &Value) -> Vec<(String, u64)> {
    let counts = report["flip_counts"].as_object().unwrap();
    counts.iter().filter(|(_, n)| n.as_u64() != Some(0)).map(|(k, n)| (k.clone(), n.as_u64().unwrap())).collect()
}

#[test]
fn the_log_spans_rotation_and_carries_arguments_and_roles() {
    require_root!();
    let e = evidence();
    assert!(rotated(&e.log).len() >= 2, "the log should span several files");
    let text: String = e.records.iter().map(|r| format!("{r}\n")).collect();
    assert!(!text.contains(SECRET), "a secret reached the audit log");
    let started: Vec<&Value> = e.records.iter().filter(|r| r["decision"] == "started").collect();
    let agent_uid = agent::id("-u", AGENT);
    let mine: Vec<&&Value> = started.iter().filter(|r| r["caller"]["uid"] == agent_uid).collect();
    assert_eq!(mine.len(), 3);
    assert_eq!((mine[0]["role"].as_str(), mine[0]["user"].as_str()), (Some("agent"), Some(AGENT)));
    assert_eq!(mine[0]["arguments"], r#"{"text":"abc"}"#);
    let denied = e.records.iter().find(|r| r["decision"] == "denied").unwrap();
    assert_eq!(
        (denied["tool"].as_str(), denied["role"].as_str(), denied["arguments"].as_str()),
        (Some("hidden"), Some("agent"), Some("{}"))
    );
}

#[test]
fn the_same_policy_flips_nothing_across_rotated_files() {
    require_root!();
    let (out, r) = replay_json(POLICY);
    out.assert_code(0);
    assert_eq!(flips(&r), vec![]);
    // 8 started (the confirmed call's is counted with its request), 2 invalid, 1 denied.
    assert_eq!((r["calls"].as_u64(), r["log"]["starts_mid_chain"].as_bool()), (Some(11), Some(false)));
    assert!(r["log"]["files"].as_array().unwrap().len() >= 3, "{r}");
    // The login call's secret was redacted in the record: its validation cannot be replayed.
    assert_eq!(r["not_replayable_counts"], json!({ "redacted_secret": 1 }));
    assert_eq!(r["replayed"].as_u64(), Some(10));
}

#[test]
fn a_removed_grant_is_counted_per_path_argument() {
    require_root!();
    let edited = POLICY.replacen("read = [\"/etc/hostname\"]\n", "", 1);
    assert_ne!(edited, POLICY);
    let (out, r) = replay_json(&edited);
    out.assert_code(1);
    assert_eq!(flips(&r), vec![("grant_removed".into(), CAT_FILE_CALLS as u64)]);
    let group = &r["flips"][0];
    assert_eq!((group["tool"].as_str(), group["kind"].as_str()), (Some("cat-file"), Some("grant_removed")));
    assert_eq!(group["example"]["arguments"], json!({ "file": "/etc/hostname" }));
    let why = group["example"]["why"].as_str().unwrap();
    assert!(why.contains("param \"file\": /etc/hostname is inside no `read`"), "{why}");
    // The grant moved to the parent directory still covers it; a `deny` carve-out of it does not.
    let (out, r) = replay_json(&POLICY.replacen("read = [\"/etc/hostname\"]", "read = [\"/etc\"]", 1));
    out.assert_code(0);
    assert_eq!(flips(&r), vec![]);
    let carved =
        POLICY.replacen("read = [\"/etc/hostname\"]", "read = [{ path = \"/etc\", deny = [\"hostname\"] }]", 1);
    let (out, r) = replay_json(&carved);
    out.assert_code(1);
    assert_eq!(flips(&r), vec![("grant_removed".into(), CAT_FILE_CALLS as u64)]);
}

#[test]
fn a_removed_user_refuses_exactly_its_allowed_calls() {
    require_root!();
    let edited = POLICY.replace(
        r#"allow = { users = ["cordon-t-agent"] }

[tools.echo.params.text]"#,
        r#"allow = { users = [] }

[tools.echo.params.text]"#,
    );
    assert_ne!(edited, POLICY);
    let (out, r) = replay_json(&edited);
    out.assert_code(1);
    // The agent's three allowed echo calls; its invalid one stays refused; root's are admin.
    assert_eq!(flips(&r), vec![("allowed_now_refused".into(), 3)]);
    let group = &r["flips"][0];
    assert_eq!(
        (group["tool"].as_str(), group["user"].as_str(), group["count"].as_u64()),
        (Some("echo"), Some(AGENT), Some(3))
    );
    assert_eq!(group["example"]["arguments"], json!({ "text": "abc" }));
}

#[test]
fn a_narrowed_pattern_names_the_code_and_field() {
    require_root!();
    let (out, r) = replay_json(&POLICY.replacen(r#"pattern = "^[a-z]+$""#, r#"pattern = "^[a-x]+$""#, 1));
    out.assert_code(1);
    assert_eq!(flips(&r), vec![("allowed_now_refused".into(), 1)]);
    let e = &r["flips"][0]["example"];
    assert_eq!(e["arguments"], json!({ "text": "xyz" }));
    assert!(e["new"].as_str().unwrap().contains("INVALID_FIELD_VALUE, field text"), "{e}");
}

#[test]
fn an_added_confirmation_is_counted_per_caller_and_fail_on_gates_on_kinds() {
    require_root!();
    let edited = POLICY.replacen(
        r#"command = ["/usr/bin/printf", "[%s]", "{{text}}"]"#,
        "command = [\"/usr/bin/printf\", \"[%s]\", \"{{text}}\"]\nconfirm = \"agent\"",
        1,
    );
    let (out, r) = replay_json(&edited);
    out.assert_code(1);
    assert_eq!(flips(&r), vec![("confirmation_added".into(), 4)]);
    let per_caller: Vec<u64> = r["flips"].as_array().unwrap().iter().map(|g| g["count"].as_u64().unwrap()).collect();
    assert_eq!(per_caller.iter().sum::<u64>(), 4);
    assert_eq!(per_caller.len(), 2, "root and the agent: {r}");
    let dir = candidate(&edited);
    replay(&evidence().log, dir.path(), &["--fail-on", "allowed_now_refused,argv_changed"]).assert_code(0);
    replay(&evidence().log, dir.path(), &["--fail-on", "confirmation_added"]).assert_code(1);
    let bad = replay(&evidence().log, dir.path(), &["--fail-on", "everything"]);
    bad.assert_code(2);
    assert!(bad.stderr.contains("not a flip kind"), "{}", bad.stderr);
}

#[test]
fn a_secret_of_either_policy_never_reaches_the_report() {
    require_root!();
    // The candidate marks the user secret too (and confirms login, so the call flips).
    let edited = POLICY
        .replacen(
            "pattern = \"^[a-z]+$\"\nrequired = true\n\n[tools.login.params.password]",
            "pattern = \"^[a-z]+$\"\nrequired = true\nsecret = true\n\n[tools.login.params.password]",
            1,
        )
        .replacen(
            r#"command = ["/usr/bin/printf", "%s:%s", "{{user}}", "{{password}}"]"#,
            "command = [\"/usr/bin/printf\", \"%s:%s\", \"{{user}}\", \"{{password}}\"]\nconfirm = \"agent\"",
            1,
        );
    assert_ne!(edited, POLICY);
    let dir = candidate(&edited);
    for extra in [&[][..], &["--json"][..]] {
        let out = replay(&evidence().log, dir.path(), extra);
        let all = format!("{}{}", out.stdout, out.stderr);
        assert!(out.stdout.contains("login"), "{all}");
        assert!(!all.contains(SECRET) && !all.contains("zelda"), "a secret in the report:\n{all}");
    }
}

#[test]
fn an_edited_line_is_exit_2_naming_it() {
    require_root!();
    let copy = copy_log();
    let first = rotated(&copy.1)[0].clone();
    let text = std::fs::read_to_string(&first).unwrap();
    let n = text.lines().position(|l| l.contains(r#""decision":"started""#)).unwrap();
    let edited: Vec<String> = text
        .lines()
        .enumerate()
        .map(|(i, l)| if i == n { l.replace("\"hi\"", "\"ho\"") } else { l.to_string() })
        .collect();
    assert_ne!(edited.join("\n") + "\n", text);
    std::fs::write(&first, edited.join("\n") + "\n").unwrap();
    let dir = candidate(POLICY);
    let out = replay(&copy.1, dir.path(), &[]);
    out.assert_code(2);
    let at = format!("{}:{}: record", first.display(), n + 1);
    assert!(out.stderr.contains(&at) && out.stderr.contains("was altered"), "{}", out.stderr);
}

#[test]
fn a_deleted_middle_file_is_an_unrecorded_gap_and_a_missing_first_one_is_fine() {
    require_root!();
    let dir = candidate(POLICY);
    let copy = copy_log();
    let files = rotated(&copy.1);
    std::fs::remove_file(&files[0]).unwrap();
    let out = replay(&copy.1, dir.path(), &["--json"]);
    out.assert_code(0);
    assert_eq!(out.json()["log"]["starts_mid_chain"], true);
    let copy = copy_log();
    std::fs::remove_file(&rotated(&copy.1)[1]).unwrap();
    let out = replay(&copy.1, dir.path(), &[]);
    out.assert_code(2);
    assert!(out.stderr.contains("unrecorded gap") && out.stderr.contains("are missing"), "{}", out.stderr);
}

#[test]
fn a_forged_huge_line_is_refused_unread() {
    require_root!();
    let dir = candidate(POLICY);
    let copy = copy_log();
    let mut text = std::fs::read_to_string(&copy.1).unwrap();
    text.push_str(&format!("{{\"seq\":99999,\"x\":\"{}\"}}\n", "A".repeat(3 << 20)));
    std::fs::write(&copy.1, text).unwrap();
    let out = replay(&copy.1, dir.path(), &[]);
    out.assert_code(2);
    assert!(out.stderr.contains("a line longer than 1048576 bytes"), "{}", out.stderr);
    // A candidate that does not load is trouble too.
    let broken = candidate("version = 1\n[tools.x]\n");
    replay(&evidence().log, broken.path(), &[]).assert_code(2);
}

/// A private copy of the evidence's files (a test that edits them).
fn copy_log() -> (tempfile::TempDir, PathBuf) {
    let e = evidence();
    let dir = tempfile::tempdir().unwrap();
    for f in rotated(&e.log).into_iter().chain([e.log.clone()]) {
        std::fs::copy(&f, dir.path().join(f.file_name().unwrap())).unwrap();
    }
    let log = dir.path().join(e.log.file_name().unwrap());
    (dir, log)
}

/// A `hosts` tool's recorded connections against a candidate that removes the granted host
/// (each allowed connection now refused) and one that adds the refused one.
#[test]
fn a_removed_host_refuses_exactly_the_recorded_connections_and_an_added_one_allows() {
    const CURL: &str = "/usr/bin/curl";
    if !cordon_tests::is_root() {
        cordon_tests::skip!(cordon_tests::Skip::NotRoot, "a network namespace per tool");
        return;
    }
    if !Path::new(CURL).exists() {
        cordon_tests::skip!(cordon_tests::Skip::MissingTool(CURL), "the tool runs {CURL}");
        return;
    }
    let port = cordon_tests::hello_upstream();
    let policy = |hosts: &str| {
        format!(
            r#"version = 1

[tools.fetch]
description = "fetches a URL"
reason = "tests"
timeout = "20s"
command = ["{CURL}", "-sS", "--max-time", "10", "{{{{url}}}}"]
network = {{ hosts = [{hosts}] }}

[tools.fetch.params.url]
type = "string"
pattern = "http://[^\\x00 ]+"
required = true
"#
        )
    };
    let granted = format!("\"127.0.0.1:{port}\"");
    let d = Daemon::start(&[("t.toml", &policy(&granted))]);
    for _ in 0..2 {
        let (_, r) = d.run_json("fetch", &json!({ "url": format!("http://127.0.0.1:{port}/a") }));
        assert_eq!(r["exit_code"].as_i64(), Some(0), "{r:#}");
    }
    // Not listed: refused by the proxy (curl without -f still exits 0; the record says it).
    d.run_json("fetch", &json!({ "url": format!("http://localhost:{port}/b") }));
    let mut egress = Vec::new();
    let all = eventually(Duration::from_secs(10), || {
        egress = d.audit_records().into_iter().filter(|r| r["decision"] == "egress").collect();
        egress.len() == 3
    });
    assert!(all, "{egress:#?}");
    let refused: Vec<&Value> = egress.iter().filter(|r| r["allowed"] == false).collect();
    assert_eq!((refused.len(), refused[0]["why"].as_str()), (1, Some("not-listed")), "{egress:#?}");
    // `hosts = []` does not load: the candidate keeps another port only.
    let removed = candidate(&policy("\"127.0.0.1:1\""));
    let out = replay(&d.audit, removed.path(), &["--json"]);
    out.assert_code(1);
    let r = out.json();
    assert_eq!((flips(&r), r["egress"].as_u64()), (vec![("egress_now_refused".into(), 2)], Some(3)));
    let added = candidate(&policy(&format!("{granted}, \"localhost:{port}\"")));
    let out = replay(&d.audit, added.path(), &["--json"]);
    out.assert_code(1);
    // The connection, and the proxy's denial in the call's terminal record.
    assert_eq!(flips(&out.json()), vec![("denial_now_granted".into(), 1), ("egress_now_allowed".into(), 1)]);
}
