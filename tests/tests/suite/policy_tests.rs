//! Policy tests and lints through the real binaries: `cordon policy test`, `cordon policy check
//! --deny-warnings`, and `cordon run --dry-run` against the real daemon (validated and resolved
//! there, refused like a real call, audited as `dry_run`, running nothing).

use std::path::Path;

use cordon_tests::{Daemon, cordon_at};
use serde_json::json;

const NO_SOCKET: &str = "/nonexistent/cordon.sock";

fn offline(args: &[&str]) -> cordon_tests::Output {
    cordon_at(Path::new(NO_SOCKET), args)
}

const GREP: &str = r#"version = 1
[tools.grep]
description = "search"
reason = "tests"
command = ["grep", "-rn", "--", "{{pattern}}", "{{path}}"]
working_dir = "/srv"

[tools.grep.params.pattern]
type = "string"
pattern = "[a-z]+"
required = true

[tools.grep.params.path]
type = "path"
default = "."

[[tools.grep.examples]]
args = { pattern = "x", path = "src" }
argv = ["grep", "-rn", "--", "x", "/srv/src"]

[[tools.grep.refuse]]
args = { pattern = "-rf" }
code = "INVALID_FIELD_VALUE"
"#;

#[test]
fn policy_test_prints_each_outcome_and_fails_on_a_failing_example() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(&good, GREP).unwrap();
    let out = offline(&["policy", "test", good.to_str().unwrap()]);
    out.assert_code(0);
    assert!(out.stdout.contains(r#"grep example: ["grep","-rn","--","x","/srv/src"]"#), "{out:#?}");
    assert!(out.stdout.contains("grep refuse: INVALID_FIELD_VALUE"), "{out:#?}");
    assert!(out.stdout.contains("2 passed, 0 failed"), "{out:#?}");

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, GREP.replace(r#""x", "/srv/src"]"#, r#""x", "src"]"#)).unwrap();
    let out = offline(&["policy", "test", "--json", bad.to_str().unwrap()]);
    out.assert_code(65);
    let j = out.json();
    assert_eq!((j["ok"].clone(), j["passed"].clone(), j["failed"].clone()), (json!(false), json!(1), json!(1)), "{j}");
    let failed = &j["results"][0];
    assert_eq!(
        (failed["passed"].clone(), failed["line"].clone(), failed["column"].clone()),
        (json!(false), json!(17), json!(1))
    );
    assert!(failed["message"].as_str().unwrap().contains("not the expected argv"), "{j}");
    // The same example fails `policy check` (and a daemon's load) at its position.
    let out = offline(&["policy", "check", bad.to_str().unwrap()]);
    out.assert_code(65);
    assert!(out.stderr.contains(&format!("{}:17:1: example of tool \"grep\" resolves to", bad.display())), "{out:#?}");
}

#[test]
fn deny_warnings_fails_policy_check_on_a_lint() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.toml");
    std::fs::write(
        &file,
        "version = 1\n[tools.shell]\ndescription = \"d\"\nreason = \"r\"\ncommand = [\"sh\", \"-c\", \"ls {{x}}\"]\n\
         [tools.shell.params.x]\ntype = \"string\"\npattern = \"[a-z]+\"\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let out = offline(&["policy", "check", path]);
    out.assert_code(0);
    assert!(out.stderr.contains(&format!("{path}:5:")) && out.stderr.contains("[interpreter-code:"), "{out:#?}");
    let out = offline(&["policy", "check", "--deny-warnings", path]);
    out.assert_code(65);
    assert!(out.stdout.contains("--deny-warnings"), "{out:#?}");
    let out = offline(&["policy", "check", "--deny-warnings", "--json", path]);
    out.assert_code(65);
    assert_eq!(out.json()["ok"], false);
}

#[test]
fn the_bundled_example_policies_pass_deny_warnings() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/examples");
    let out = offline(&["policy", "check", "--deny-warnings", examples.to_str().unwrap()]);
    out.assert_code(0);
}

#[test]
fn dry_run_resolves_in_the_daemon_runs_nothing_and_refuses_like_a_real_call() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path().to_str().unwrap();
    let policy = format!(
        "version = 1\n[tools.make-file]\ndescription = \"creates a file\"\nreason = \"tests\"\n\
         command = [\"touch\", \"--\", \"{{{{name}}}}\"]\nworking_dir = \"{w}\"\nwrite = [\"{w}\"]\n\
         env = {{ GREETING = \"hello\" }}\n\
         [tools.make-file.params.name]\ntype = \"path\"\nrequired = true\n"
    );
    let d = Daemon::start(&[("tools.toml", &policy)]);
    let target = work.path().join("created");

    let out = d.cordon(&["run", "make-file", "--dry-run", "--json", "--arg", "name=created"]);
    out.assert_code(0);
    let j = out.json();
    assert_eq!(j["dry_run"], true, "{j}");
    assert_eq!(j["argv"], json!(["touch", "--", target.to_str().unwrap()]), "{j}");
    assert_eq!(j["working_dir"], w);
    assert_eq!(j["env"]["GREETING"], "hello", "{j}");
    assert!(j["executable"].as_str().unwrap().ends_with("/touch"), "{j}");
    assert_eq!(j["grants"]["write"], json!([w]), "{j}");
    assert_eq!(j["uid"], nix::unistd::geteuid().as_raw());
    assert!(!target.exists(), "a dry run created the file");

    // Human-readable form.
    let out = d.cordon(&["run", "make-file", "--dry-run", "--arg", "name=created"]);
    out.assert_code(0);
    assert!(out.stdout.contains("nothing ran") && out.stdout.contains("GREETING=hello"), "{out:#?}");
    assert!(
        out.stdout.contains("(TMPDIR is set when the call runs"),
        "the temp space is decided at run time: {out:#?}"
    );
    assert!(!target.exists(), "a dry run created the file");

    // A refused dry run has the code (and exit status) of the real call.
    for args in [&["--arg", "name=../outside"][..], &[][..], &["--arg", "nmae=x"][..]] {
        let mut dry = vec!["run", "make-file", "--dry-run", "--json"];
        dry.extend_from_slice(args);
        let mut real = vec!["run", "make-file", "--json"];
        real.extend_from_slice(args);
        let (a, b) = (d.cordon(&dry), d.cordon(&real));
        assert_eq!(a.code, b.code, "{a:#?} {b:#?}");
        assert_eq!(a.json()["error"]["code"], b.json()["error"]["code"], "{a:#?} {b:#?}");
        assert!(a.json()["error"]["code"].is_string(), "{a:#?}");
    }
    let a = d.cordon(&["run", "no-such-tool", "--dry-run", "--json"]);
    assert_eq!(a.json()["error"]["code"], "UNKNOWN_TOOL", "{a:#?}");

    // Audited as a dry run; its refusals say so.
    let records = d.audit_records();
    let dry: Vec<_> = records.iter().filter(|r| r["decision"] == "dry_run").collect();
    assert_eq!(dry.len(), 2, "{records:#?}");
    assert_eq!(dry[0]["argv"], json!(["touch", "--", target.to_str().unwrap()]), "{records:#?}");
    assert!(records.iter().any(|r| r["decision"] == "invalid" && r["dry_run"] == true), "{records:#?}");
    assert!(!records.iter().any(|r| r["decision"] == "started" && r["argv"][2] == target.to_str().unwrap()));

    // The real call does create it.
    let out = d.cordon(&["run", "make-file", "--arg", "name=created"]);
    out.assert_code(0);
    assert!(target.exists());
}
