//! One policy set on many hosts: the policy digest (`cordon status`, every audit record) is the
//! same for the same files wherever and however they were written, changes with them and with
//! each reload; `cordon policy diff` compares daemons and directories tool by tool, with the
//! exit status of diff(1).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use cordon_tests::Daemon;

const TOOLS: &str = r#"version = 1

[tools.echo]
description = "prints a word"
reason = "tests"
command = ["/bin/echo", "{{word}}"]

[tools.echo.params.word]
type = "string"
pattern = "[a-z]+"
required = true

[tools.hold]
description = "waits until cancelled"
reason = "tests"
command = ["/bin/sleep", "30"]

[workflows.greet]
description = "greets"
reason = "tests"

[[workflows.greet.steps]]
tool = "echo"
args = { word = "hello" }
"#;

const MORE: &str = r#"version = 1

[tools.gone]
description = "removed in the new set"
reason = "tests"
command = ["/bin/true"]
"#;

/// `TOOLS` with `echo`'s pattern and grants changed, `gone` dropped, `fresh` added and the
/// workflow's step argument changed.
const CHANGED: &str = r#"version = 1

[tools.echo]
description = "prints a word"
reason = "tests"
command = ["/bin/echo", "{{word}}"]
read = ["/etc"]

[tools.echo.params.word]
type = "string"
pattern = "[a-z0-9]+"
required = true

[tools.hold]
description = "waits until cancelled"
reason = "tests"
command = ["/bin/sleep", "30"]

[tools.fresh]
description = "added in the new set"
reason = "tests"
command = ["/bin/true"]

[workflows.greet]
description = "greets"
reason = "tests"

[[workflows.greet.steps]]
tool = "echo"
args = { word = "howdy" }
"#;

/// The digest as coreutils computes it, independently of cordon: `sha256sum` of the `*.toml`
/// files in name order, hashed again.
fn sha256sum_digest(dir: &Path) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg("sha256sum *.toml | sha256sum")
        .env("LC_ALL", "C")
        .current_dir(dir)
        .output()
        .expect("sha256sum");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    text.split_whitespace().next().unwrap().to_string()
}

fn digest_of(d: &Daemon) -> String {
    d.cordon(&["status", "--json"]).json()["policy_digest"].as_str().unwrap().to_string()
}

fn write_at(path: &Path, text: &str, mtime: SystemTime) {
    std::fs::write(path, text).unwrap();
    std::fs::File::options().write(true).open(path).unwrap().set_modified(mtime).unwrap();
}

/// A policy directory of its own (not a daemon's) holding `files`.
fn policy_dir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("cordon-fleet-").tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

#[test]
fn two_daemons_with_the_same_files_have_the_same_digest_and_a_change_changes_it() {
    // Written in opposite orders, with different mtimes, in differently named directories.
    let one = Daemon::start(&[("a.toml", TOOLS), ("b.toml", MORE)]);
    let two = Daemon::start(&[("b.toml", MORE), ("a.toml", TOOLS)]);
    write_at(&two.policies.join("a.toml"), TOOLS, SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000));
    write_at(&two.policies.join("b.toml"), MORE, SystemTime::UNIX_EPOCH + Duration::from_secs(5));
    two.cordon(&["reload"]).assert_code(0);
    assert_ne!(one.policies, two.policies);
    let expected = sha256sum_digest(&one.policies);
    assert_eq!(expected.len(), 64);
    assert_eq!(digest_of(&one), expected);
    assert_eq!(digest_of(&two), expected, "same files, same digest, whatever the order, mtime or directory");
    let text = one.cordon(&["status"]);
    text.assert_code(0);
    assert!(text.stdout.contains(&format!("\npolicy set   {expected}\n")), "{text:?}");

    // One pattern character: another policy, another digest (after the reload, not before).
    two.write_policy("a.toml", &TOOLS.replace("[a-z]+", "[a-z]*"));
    assert_eq!(digest_of(&two), expected, "nothing changes until the reload");
    two.cordon(&["reload"]).assert_code(0);
    let changed = digest_of(&two);
    assert_ne!(changed, expected);
    assert_eq!(changed, sha256sum_digest(&two.policies));
    assert_eq!(two.cordon(&["status", "--json"]).json()["generation"], 3);
}

#[test]
fn every_record_carries_the_digest_of_its_generation_across_a_reload() {
    let d = Daemon::start(&[("a.toml", TOOLS)]);
    let first = digest_of(&d);
    d.cordon(&["run", "echo", "--arg", "word=one"]).assert_code(0);
    d.cordon(&["run", "echo", "--arg", "word=NO"]).assert_code(65);
    // A run that outlives the reload: its terminal record names the policy it started under.
    let held = d.cordon(&["run", "hold", "--detach"]);
    held.assert_code(0);
    let held = held.stdout.trim().to_string();

    d.write_policy("a.toml", &TOOLS.replace("[a-z]+", "[a-z0-9]+"));
    d.cordon(&["reload"]).assert_code(0);
    let second = digest_of(&d);
    assert_ne!(first, second);
    d.cordon(&["run", "echo", "--arg", "word=two2"]).assert_code(0);
    d.cordon(&["job", &held, "--cancel"]).assert_code(0);
    d.cordon(&["job", &held, "--wait", "--json"]);

    let records = d.audit_records();
    let reload = records.iter().position(|r| r["decision"] == "reload").expect("a reload record");
    assert_eq!(records[reload]["policy"], second.as_str(), "{:#?}", records[reload]);
    assert_eq!(records[reload]["previous_policy"], first.as_str());
    for (i, r) in records.iter().enumerate() {
        let expected = if r["id"] == held.as_str() || i < reload { &first } else { &second };
        assert_eq!(r["policy"], expected.as_str(), "record {i}: {r}");
    }
    let decisions: Vec<&str> = records.iter().map(|r| r["decision"].as_str().unwrap()).collect();
    for d in ["daemon_started", "started", "finished", "invalid", "reload", "cancelled"] {
        assert!(decisions.contains(&d), "no {d} record: {decisions:?}");
    }
    let cancelled = records.iter().find(|r| r["decision"] == "cancelled").unwrap();
    assert_eq!(cancelled["id"], held.as_str());
    assert_eq!(cancelled["policy"], first.as_str(), "the generation it ran under, not the current one");
    // `audit tail` shows the first 12 hex digits, enough to tell sets apart by eye.
    let tail = d.cordon(&["audit", "tail", "-n", "1", "--decision", "reload"]);
    tail.assert_code(0);
    assert!(tail.stdout.contains(&format!("  policy={}  ", &second[..12])), "{tail:?}");
    assert!(tail.stdout.contains(&format!("  previous_policy={}", &first[..12])), "{tail:?}");
    assert!(!tail.stdout.contains(second.as_str()), "{tail:?}");
    // The chain holds with the new field.
    let verify = d.cordon(&["audit", "verify", d.audit.to_str().unwrap()]);
    verify.assert_code(0);
}

/// The lines `cordon policy diff` prints for the sets `TOOLS` + `MORE` (old) and `CHANGED` (new).
fn expected_diff(old: &str, new: &str) -> String {
    format!(
        "old: {old}\nnew: {new}\n\
         added: fresh\n\
         removed: gone\n\
         changed: echo\n  \
         params.word.pattern: \"[a-z]+\" -> \"[a-z0-9]+\"\n  \
         read: [] -> [\"/etc\"]\n\
         changed workflow: greet\n  \
         steps.1.args.word: \"hello\" -> \"howdy\"\n"
    )
}

#[test]
fn policy_diff_of_two_directories_names_added_removed_and_changed_keys() {
    let old = policy_dir(&[("a.toml", TOOLS), ("b.toml", MORE)]);
    let new = policy_dir(&[("a.toml", CHANGED)]);
    let (o, n) = (old.path().to_str().unwrap(), new.path().to_str().unwrap());
    let (od, nd) = (sha256sum_digest(old.path()), sha256sum_digest(new.path()));
    let out = cordon_tests::cordon_at(Path::new("/nonexistent/socket"), &["policy", "diff", o, n]);
    out.assert_code(1);
    let title = |dir: &str, digest: &str| format!("directory {dir}, policy set {digest}");
    assert_eq!(out.stdout, expected_diff(&title(o, &od), &title(n, &nd)));

    let out = cordon_tests::cordon_at(Path::new("/nonexistent/socket"), &["policy", "diff", o, n, "--json"]);
    out.assert_code(1);
    assert_eq!(
        out.json(),
        json!({
            "identical": false,
            "old": { "source": "directory", "policy_dir": o, "policy_digest": od },
            "new": { "source": "directory", "policy_dir": n, "policy_digest": nd },
            "added": ["fresh"],
            "removed": ["gone"],
            "changed": [{ "name": "echo", "keys": [
                { "key": "params.word.pattern", "old": "[a-z]+", "new": "[a-z0-9]+" },
                { "key": "read", "old": [], "new": ["/etc"] },
            ]}],
            "workflows": { "added": [], "removed": [], "changed": [{ "name": "greet", "keys": [
                { "key": "steps.1.args.word", "old": "hello", "new": "howdy" },
            ]}]},
            "servers": { "added": [], "removed": [], "changed": [] },
        })
    );

    // Identical sets: exit 0.
    let same = policy_dir(&[("b.toml", MORE), ("a.toml", TOOLS)]);
    let out = cordon_tests::cordon_at(Path::new("/x"), &["policy", "diff", o, same.path().to_str().unwrap()]);
    out.assert_code(0);
    assert!(out.stdout.ends_with("\nidentical\n"), "{out:?}");

    // A comment: the files differ (exit 1), no tool or workflow does.
    let commented = policy_dir(&[("a.toml", &format!("# reviewed\n{TOOLS}")), ("b.toml", MORE)]);
    let out = cordon_tests::cordon_at(Path::new("/x"), &["policy", "diff", o, commented.path().to_str().unwrap()]);
    out.assert_code(1);
    assert!(
        out.stdout.ends_with("\nno tool, workflow or server differs; the files do (comments, layout or file names)\n")
    );

    // Trouble is 2, like diff: a missing directory, a directory that does not load.
    let out = cordon_tests::cordon_at(Path::new("/x"), &["policy", "diff", o, "/nonexistent/policies"]);
    out.assert_code(2);
    assert_eq!(
        out.stderr.trim_end(),
        "cordon: /nonexistent/policies is not a directory; `cordon policy diff` compares policy directories (and \
         running daemons)"
    );
    let broken = policy_dir(&[("a.toml", "version = 1\n[tools.x]\ncommand = 3\n")]);
    let out =
        cordon_tests::cordon_at(Path::new("/x"), &["policy", "diff", o, broken.path().to_str().unwrap(), "--json"]);
    out.assert_code(2);
    let message = out.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(message.contains("do not load, so there is nothing to compare"), "{message}");
}

#[test]
fn policy_diff_of_a_daemon_against_a_directory_and_another_daemon() {
    let old = Daemon::start(&[("a.toml", TOOLS), ("b.toml", MORE)]);
    let new = policy_dir(&[("a.toml", CHANGED)]);
    let n = new.path().to_str().unwrap();
    let (od, nd) = (sha256sum_digest(&old.policies), sha256sum_digest(new.path()));
    let daemon_title = |d: &Daemon, generation: u64, digest: &str| {
        format!("cordond at {} (generation {generation}), policy set {digest}", d.socket.display())
    };

    // The daemon against a directory: what a reload from it would change.
    let out = old.cordon(&["policy", "diff", n]);
    out.assert_code(1);
    assert_eq!(out.stdout, expected_diff(&daemon_title(&old, 1, &od), &format!("directory {n}, policy set {nd}")));
    // Against its own directory: identical, the daemon's tools agree with the offline load.
    let out = old.cordon(&["policy", "diff", old.policies.to_str().unwrap()]);
    out.assert_code(0);
    assert!(out.stdout.ends_with("\nidentical\n"), "{out:?}");

    // Two daemons.
    let other = Daemon::start(&[("a.toml", CHANGED)]);
    let out = old.cordon(&["policy", "diff", "--against-socket", other.socket.to_str().unwrap()]);
    out.assert_code(1);
    assert_eq!(out.stdout, expected_diff(&daemon_title(&old, 1, &od), &daemon_title(&other, 1, &nd)));
    let out = old.cordon(&["policy", "diff", "--against-socket", other.socket.to_str().unwrap(), "--json"]);
    let v: Value = out.json();
    assert_eq!(v["old"]["generation"], 1);
    assert_eq!(v["new"]["policy_dir"], other.policies.to_str().unwrap());

    // After a reload to the same files, the daemons agree.
    std::fs::remove_file(old.policies.join("b.toml")).unwrap();
    old.write_policy("a.toml", CHANGED);
    old.cordon(&["reload"]).assert_code(0);
    let out = old.cordon(&["policy", "diff", "--against-socket", other.socket.to_str().unwrap()]);
    out.assert_code(0);
    assert_eq!(
        out.stdout,
        format!("old: {}\nnew: {}\nidentical\n", daemon_title(&old, 2, &nd), daemon_title(&other, 1, &nd))
    );

    // A daemon that is not there: 2.
    let out = old.cordon(&["policy", "diff", "--against-socket", "/nonexistent/cordon.sock"]);
    out.assert_code(2);
    assert!(out.stderr.contains("cordond is not running at /nonexistent/cordon.sock"), "{out:?}");
}
