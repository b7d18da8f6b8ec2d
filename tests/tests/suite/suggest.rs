//! `cordon policy suggest TOOL` (issue 32, item 2): the real cordond denies a tool what its
//! policy lacks, `policy suggest` reads the denial from the audit log and prints the one grant
//! that allows it (the exact diff lines are asserted), `--write` applies it, `cordon reload`, and
//! the same call passes: for a read, a write, an exec (landlock where kernel audit logs it, else
//! the unverified inference with `--include-inferred`), a seccomp `socket` and a host the egress
//! proxy refused. Then, on chained logs the tests write themselves: what no key allows, crafted
//! paths (/etc/sudoers.d), a grant the loader would warn about, the `--since` window, and a forged
//! line (exit 2 naming it).

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use cordon_core::audit::chain;
use cordon_tests::{Daemon, bin};
use serde_json::{Value, json};

const CURL: &str = "/usr/bin/curl";

fn q(s: impl AsRef<Path>) -> String {
    serde_json::to_string(s.as_ref().to_str().unwrap()).unwrap()
}

fn mode(p: &Path, m: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
}

/// `cordon policy suggest ARGS...` (no daemon needed: `--policies` and `--audit` are given).
fn suggest(args: &[&str]) -> std::process::Output {
    Command::new(bin("cordon")).args(["policy", "suggest"]).args(args).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The diff's changed lines (`-`/`+`, without the `---`/`+++` header).
fn changed(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| (l.starts_with('+') || l.starts_with('-')) && !l.starts_with("+++") && !l.starts_with("---"))
        .map(str::to_string)
        .collect()
}

/// An argv as the comment writes it.
fn words(argv: &Value) -> String {
    argv.as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let a = a.as_str().unwrap();
            if !a.is_empty() && a.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-=:@+,".contains(&b)) {
                a.to_string()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The comment `policy suggest` writes for the one denial `d` of the invocation `id`.
fn comment(d: &Daemon, id: &str, denial: &Value) -> String {
    let records = d.audit_records();
    let started = records.iter().find(|r| r["id"] == id && r["decision"] == "started").unwrap();
    let terminal = records.iter().find(|r| r["id"] == id && r["decision"] == "finished").unwrap();
    let access: Vec<&str> =
        denial["access"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let target = denial["target"].as_str().unwrap();
    let what = match denial["source"].as_str().unwrap() {
        "proxy" => format!("{target} refused by the egress proxy (not listed)"),
        "seccomp" => format!("seccomp refused {target}"),
        _ if access.is_empty() => format!("{} needed on {target}", denial["grant_key"].as_str().unwrap()),
        _ => format!("{} denied", access.join(",")),
    };
    let unverified = if denial["source"] == "inferred" {
        "unverified, inferred from the tool's own stderr, no kernel record: "
    } else {
        ""
    };
    let times = match denial["count"].as_u64().unwrap() {
        1 => "once".to_string(),
        n => format!("{n} times"),
    };
    format!(
        "{unverified}{what} {times} (first {}, invocation {id} by uid 0: {})",
        terminal["time"].as_str().unwrap(),
        words(&started["argv"])
    )
}

/// The diff lines a case expects, given the comment.
type Expect = Box<dyn Fn(&str) -> Vec<String>>;

/// One kind of denial: the tool, its policy file's name and text, the grant's key, and the
/// diff lines expected (given the comment).
struct Case {
    tool: &'static str,
    file: &'static str,
    policy: String,
    /// The denial to find in the failed call's result: its grant key and target.
    key: &'static str,
    target: String,
    expect: Expect,
}

#[test]
fn each_denial_kind_gets_the_one_grant_that_allows_it_and_the_call_then_passes() {
    cordon_tests::require_root!("a root cordond: seccomp's records and the egress proxy's network namespace");
    let facts: Value =
        serde_json::from_slice(&Command::new(bin("cordond")).arg("--probe").output().unwrap().stdout).unwrap();
    let top = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
    mode(top.path(), 0o755);
    let t = top.path();
    // `ro` is granted read only (mode 0777, so file modes never refuse); `data` is under no grant.
    for d in ["ro", "data", "proj/bin", "policies"] {
        std::fs::create_dir_all(t.join(d)).unwrap();
    }
    mode(&t.join("ro"), 0o777);
    std::fs::write(t.join("data/input.txt"), "the data\n").unwrap();
    mode(&t.join("data/input.txt"), 0o644);
    std::fs::write(t.join("proj/bin/t"), "#!/bin/sh\necho ran\n").unwrap();
    mode(&t.join("proj/bin/t"), 0o755);
    let header = "version = 1\n\n[defaults]\ntimeout = \"20s\"\n";
    let tool = |name: &str, body: String| {
        format!(
            "{header}\n# The {name} case.\n[tools.{name}]\ndescription = \"{name}\"\nreason = \"suggest tests\"\n{body}"
        )
    };
    let input = t.join("data/input.txt");
    let ro = t.join("ro");
    let proj = t.join("proj");
    let mut cases = vec![
        Case {
            tool: "suggest-read",
            file: "read.toml",
            // A grant beneath /tmp keeps the host's /tmp visible (the data is there, under no grant).
            policy: tool("suggest-read", format!("command = [\"cat\", {}]\nread = [{}]\n", q(&input), q(&ro))),
            key: "read",
            target: input.display().to_string(),
            expect: Box::new({
                let (ro, input) = (q(&ro), q(&input));
                move |c| {
                    vec![
                        format!("-read = [{ro}]"),
                        format!("+read = [{ro},"),
                        format!("+  # suggested: {c}"),
                        format!("+  {input},"),
                        "+]".into(),
                    ]
                }
            }),
        },
        Case {
            tool: "suggest-write",
            file: "write.toml",
            policy: tool(
                "suggest-write",
                format!("command = [\"touch\", {}]\nread = [{}]\n", q(ro.join("new")), q(&ro)),
            ),
            key: "write",
            target: ro.join("new").display().to_string(),
            // The file is not there: it is made in its directory, which is the grant.
            expect: Box::new({
                let ro = q(&ro);
                move |c| vec!["+write = [".into(), format!("+  # suggested: {c}"), format!("+  {ro},"), "+]".into()]
            }),
        },
        Case {
            tool: "suggest-exec",
            file: "exec.toml",
            policy: tool(
                "suggest-exec",
                format!("command = [\"sh\", \"-c\", \"./bin/t\"]\nworking_dir = {p}\nread = [{p}]\n", p = q(&proj)),
            ),
            key: "exec",
            target: proj.join("bin/t").display().to_string(),
            expect: Box::new({
                let script = q(proj.join("bin/t"));
                move |c| vec!["+exec = [".into(), format!("+  # suggested: {c}"), format!("+  {script},"), "+]".into()]
            }),
        },
    ];
    if facts["denials"]["seccomp"] == true {
        cases.push(Case {
            tool: "suggest-socket",
            file: "socket.toml",
            policy: tool(
                "suggest-socket",
                "command = [\"python3\", \"-c\", \"import socket; socket.socket()\"]\n".into(),
            ),
            key: "network",
            target: "socket".into(),
            expect: Box::new(|c| vec![format!("+# suggested: {c}"), "+network = { connect_tcp = [] }".into()]),
        });
    } else {
        cordon_tests::skip!(
            cordon_tests::Skip::NoKernelAudit,
            "the seccomp case: this host does not let cordond read the kernel's audit log"
        );
    }
    let port = cordon_tests::hello_upstream();
    if Path::new(CURL).exists() {
        let url = format!("http://127.0.0.1:{port}/x");
        cases.push(Case {
            tool: "suggest-host",
            file: "host.toml",
            policy: tool(
                "suggest-host",
                format!(
                    "command = [{}, \"-sSf\", \"--max-time\", \"10\", {}]\nnetwork = {{ hosts = [\"localhost:{port}\"] }}\n",
                    q(CURL),
                    q(&url)
                ),
            ),
            key: "hosts",
            target: format!("127.0.0.1:{port}"),
            expect: Box::new(move |c| {
                vec![
                    format!("-network = {{ hosts = [\"localhost:{port}\"] }}"),
                    format!("+# suggested: {c}"),
                    format!("+network = {{ hosts = [\"localhost:{port}\", \"127.0.0.1:{port}\"] }}"),
                ]
            }),
        });
    } else {
        cordon_tests::skip!(cordon_tests::Skip::MissingTool(CURL), "the egress proxy case runs curl");
    }
    let policies = t.join("policies");
    for c in &cases {
        std::fs::write(policies.join(c.file), &c.policy).unwrap();
    }
    let d = Daemon::start_in(top, policies.clone(), &[]);
    let audit = d.audit.to_str().unwrap().to_string();
    let dir = policies.to_str().unwrap().to_string();
    for c in &cases {
        let (_, r) = d.run_json(c.tool, &json!({}));
        assert_eq!(r["ok"], false, "{}: should fail: {r:#}", c.tool);
        let denials = r["denials"].as_array().cloned().unwrap_or_default();
        let denial = denials
            .iter()
            // The path itself, or (landlock's record of a file made) its directory.
            .find(|x| {
                x["grant_key"] == c.key && x["target"].as_str().is_some_and(|t| Path::new(&c.target).starts_with(t))
            })
            .unwrap_or_else(|| panic!("{}: no {} denial of {}: {r:#}", c.tool, c.key, c.target))
            .clone();
        let inferred = denial["source"] == "inferred";
        let mut args = vec![c.tool, "--audit", &audit, "--policies", &dir];
        if inferred {
            // Without it, an inferred denial is listed as not suggested, and nothing is.
            let out = suggest(&args);
            assert_eq!(out.status.code(), Some(1), "{}: {}", c.tool, text(&out.stderr));
            assert!(text(&out.stderr).contains("--include-inferred"), "{}", text(&out.stderr));
            args.push("--include-inferred");
        }
        let out = suggest(&args);
        assert_eq!(out.status.code(), Some(0), "{}: {}{}", c.tool, text(&out.stdout), text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(stdout.starts_with(&format!("--- a/{f}\n+++ b/{f}\n@@ ", f = c.file)), "{stdout}");
        let id = r["invocation_id"].as_str().unwrap();
        assert_eq!(changed(&stdout), (c.expect)(&comment(&d, id, &denial)), "{}:\n{stdout}", c.tool);
        // --json says the same.
        let mut json_args = args.clone();
        json_args.push("--json");
        let j: Value = serde_json::from_slice(&suggest(&json_args).stdout).unwrap();
        assert_eq!((j["diff"].as_str(), j["suggested"].as_array().map(Vec::len)), (Some(stdout.as_str()), Some(1)));
        assert_eq!(j["suggested"][0]["unverified"], inferred, "{j:#}");
        assert_eq!(j["suggested"][0]["evidence"][0]["first"]["invocation_id"], id, "{j:#}");
        args.push("--write");
        let out = suggest(&args);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(text(&out.stderr).contains("run `cordon reload`"), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), stdout, "--write prints the diff it applies");
        d.cordon(&["reload"]).assert_code(0);
        let (_, r) = d.run_json(c.tool, &json!({}));
        assert_eq!((r["ok"].as_bool(), r["exit_code"].as_i64()), (Some(true), Some(0)), "{}: {r:#}", c.tool);
        assert!(r.get("denials").is_none(), "{}: {r:#}", c.tool);
        // Nothing left to suggest: the grant is there.
        let out = suggest(&args[..args.len() - 1]);
        assert_eq!(out.status.code(), Some(1), "{}: {}", c.tool, text(&out.stdout));
        assert!(text(&out.stderr).contains("already granted"), "{}", text(&out.stderr));
    }
    // The suggested policies pass `policy check`, warnings denied.
    let out = Command::new(bin("cordon")).args(["policy", "check", "--deny-warnings", &dir]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
    // The files kept their mode.
    for c in &cases {
        let m = std::fs::metadata(policies.join(c.file)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(m, 0o644, "{}", c.file);
    }
}

/// A policy directory with one tool `t` (its body given) and a chained log of `records`
/// (each `(time, fields)`), in a fresh directory.
struct Offline {
    _dir: tempfile::TempDir,
    policies: PathBuf,
    audit: PathBuf,
}

impl Offline {
    fn new(body: &str, records: &[(&str, String)]) -> Offline {
        let dir = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
        let root = dir.path().to_path_buf();
        mode(&root, 0o755);
        let policies = root.join("policies");
        std::fs::create_dir(&policies).unwrap();
        let policy = format!(
            "version = 1\n\n[tools.t]\ndescription = \"t\"\nreason = \"suggest tests\"\ncommand = [\"true\"]\n{body}"
        );
        std::fs::write(policies.join("t.toml"), policy).unwrap();
        let audit = root.join("audit.jsonl");
        let mut prev = chain::GENESIS;
        let mut log = String::new();
        for (i, (time, fields)) in records.iter().enumerate() {
            let line = format!(r#"{{"seq":{},"time":"{time}",{fields},"prev":"{}"}}"#, i + 1, chain::hex(&prev));
            prev = chain::line_hash(line.as_bytes());
            log.push_str(&line);
            log.push('\n');
        }
        std::fs::write(&audit, log).unwrap();
        Offline { _dir: dir, policies, audit }
    }

    fn suggest(&self, extra: &[&str]) -> (Option<i32>, String, String) {
        let mut args =
            vec!["t", "--audit", self.audit.to_str().unwrap(), "--policies", self.policies.to_str().unwrap()];
        args.extend_from_slice(extra);
        let out = suggest(&args);
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    }
}

/// Now, as the records write it.
fn now() -> String {
    chain::rfc3339(std::time::SystemTime::now())
}

/// A call of `t` that ended with `denials`.
fn call(id: &str, time: &str, argv: Value, denials: Value) -> Vec<(String, String)> {
    vec![
        (
            time.to_string(),
            format!(r#""decision":"started","id":"{id}","tool":"t","caller":{{"uid":1000,"gid":1000}},"argv":{argv}"#),
        ),
        (
            time.to_string(),
            format!(r#""decision":"finished","id":"{id}","tool":"t","exit_code":1,"denials":{denials}"#),
        ),
    ]
}

fn records(calls: &[Vec<(String, String)>]) -> Vec<(String, String)> {
    calls.concat()
}

fn borrowed(r: &[(String, String)]) -> Vec<(&str, String)> {
    r.iter().map(|(t, f)| (t.as_str(), f.clone())).collect()
}

fn denial(source: &str, target: &str, access: &[&str], key: &str) -> Value {
    json!({ "source": source, "target": target, "access": access, "grant_key": key, "count": 1,
            "incidental": false, "message": format!("{source} denied {target}") })
}

#[test]
fn a_denial_no_key_allows_is_listed_as_not_suggested_and_exits_1() {
    let r = records(&[call("i1", &now(), json!(["t"]), json!([denial("seccomp", "unshare", &[], "")]))]);
    let o = Offline::new("", &borrowed(&r));
    let (code, stdout, stderr) = o.suggest(&[]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert_eq!(stdout, "", "no diff");
    assert!(
        stderr.contains("not suggested: seccomp unshare: no policy key allows it: seccomp denied unshare"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing to suggest for t"), "{stderr}");
}

#[test]
fn paths_a_tool_named_itself_never_become_grants_of_system_or_secret_files() {
    let crafted = [
        denial("inferred", "/etc/sudoers.d/x", &["write"], "write"),
        denial("inferred", "/etc/sudoers.d", &["write"], "write"),
        denial("inferred", "/etc/shadow", &["read"], "read"),
        denial("inferred", "/usr/local/bin/x", &["execute"], "exec"),
        denial("inferred", "/srv/x\nwrite = [\"/\"]", &["write"], "write"),
        denial("inferred", "/srv/../etc/passwd", &["read"], "read"),
        denial("inferred", "relative/file", &["read"], "read"),
        denial("landlock", "/", &["read_dir"], "read"),
    ];
    let r = records(&[call("i1", &now(), json!(["t", "x\n# suggested"]), Value::Array(crafted.to_vec()))]);
    let o = Offline::new("", &borrowed(&r));
    for extra in [&["--include-inferred"][..], &["--include-inferred", "--broader"], &["--include-inferred", "--json"]]
    {
        let (code, stdout, stderr) = o.suggest(extra);
        assert_eq!(code, Some(1), "{extra:?}: {stdout}{stderr}");
        if extra.contains(&"--json") {
            let j: Value = serde_json::from_str(&stdout).unwrap();
            assert_eq!(j["suggested"], json!([]), "{j:#}");
            assert_eq!(j["not_suggested"].as_array().map(Vec::len), Some(crafted.len()), "{j:#}");
            continue;
        }
        assert_eq!(stdout, "", "{extra:?}");
        assert_eq!(stderr.matches("not suggested: ").count(), crafted.len(), "{stderr}");
        assert!(stderr.contains("/etc/sudoers.d holds the system's secrets"), "{stderr}");
        assert!(stderr.contains("a grant of `/` is everything"), "{stderr}");
        assert!(stderr.contains("the path has control characters"), "{stderr}");
    }
    let policy = std::fs::read_to_string(o.policies.join("t.toml")).unwrap();
    let (code, _, _) = o.suggest(&["--include-inferred", "--write"]);
    assert_eq!(code, Some(1));
    assert_eq!(std::fs::read_to_string(o.policies.join("t.toml")).unwrap(), policy, "nothing written");
}

#[test]
fn a_grant_the_loader_would_warn_about_is_dropped_with_the_warning() {
    // exec beneath a write root: the write-exec lint (the tool could run what it wrote).
    let out = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
    mode(out.path(), 0o755);
    std::fs::write(out.path().join("tool"), "#!/bin/sh\n").unwrap();
    let target = out.path().join("tool").display().to_string();
    let r = records(&[call("i1", &now(), json!(["t"]), json!([denial("landlock", &target, &["execute"], "exec")]))]);
    let o = Offline::new(&format!("write = [{}]\n", q(out.path())), &borrowed(&r));
    let (code, stdout, stderr) = o.suggest(&[]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!("exec += {target:?} would not pass `cordon policy check`: warning: ")),
        "{stderr}"
    );
    assert!(stderr.contains("[write-exec:"), "{stderr}");
}

#[test]
fn since_leaves_out_older_records() {
    let old = chain::rfc3339(std::time::SystemTime::now() - std::time::Duration::from_secs(10 * 24 * 3600));
    let file = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
    mode(file.path(), 0o755);
    let path = file.path().join("input");
    std::fs::write(&path, "x").unwrap();
    let p = path.display().to_string();
    let r = records(&[call("old", &old, json!(["t"]), json!([denial("landlock", &p, &["read_file"], "read")]))]);
    let o = Offline::new("", &borrowed(&r));
    let (code, stdout, stderr) = o.suggest(&[]);
    assert_eq!((code, stdout.as_str()), (Some(1), ""), "{stderr}");
    assert!(stderr.contains("t: 0 call(s) in the window, 0 denied"), "{stderr}");
    let (code, _, stderr) = o.suggest(&["--since", "9d"]);
    assert_eq!(code, Some(1), "{stderr}");
    let (code, stdout, stderr) = o.suggest(&["--since", "11d"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        changed(&stdout),
        [
            "+read = [".to_string(),
            format!("+  # suggested: read_file denied once (first {old}, invocation old by uid 1000: t)"),
            format!("+  {},", q(&path)),
            "+]".into()
        ]
    );
    let (code, _, stderr) = o.suggest(&["--since", "a week"]);
    assert_eq!(code, Some(2), "{stderr}");
}

#[test]
fn a_forged_audit_line_is_trouble_naming_the_line() {
    let r = records(&[
        call("i1", &now(), json!(["t"]), json!([denial("seccomp", "unshare", &[], "")])),
        call("i2", &now(), json!(["t"]), json!([denial("seccomp", "unshare", &[], "")])),
    ]);
    let o = Offline::new("", &borrowed(&r));
    let log = std::fs::read_to_string(&o.audit).unwrap();
    // An edit that keeps the line valid JSON: its hash no longer matches the next record's prev.
    let forged = log.replacen(r#""grant_key":"""#, r#""grant_key":"write""#, 1);
    assert_ne!(forged, log);
    std::fs::write(&o.audit, forged).unwrap();
    let (code, stdout, stderr) = o.suggest(&[]);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(stderr.contains(&format!("{}:2: record 2 was altered", o.audit.display())), "{stderr}");
    // A line that is not a record at all, and one past the size bound.
    std::fs::write(&o.audit, format!("{log}{{\"seq\":5\n")).unwrap();
    let (code, _, stderr) = o.suggest(&[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("audit.jsonl:5: not a JSON record"), "{stderr}");
    std::fs::write(&o.audit, format!("{log}{}\n", "x".repeat(2 << 20))).unwrap();
    let (code, _, stderr) = o.suggest(&[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("audit.jsonl:5: a line longer than 1048576 bytes: refused"), "{stderr}");
}

#[test]
fn write_replaces_the_file_with_its_mode_kept_and_prints_what_it_applied() {
    let file = tempfile::Builder::new().prefix("cordon-test-").tempdir().unwrap();
    mode(file.path(), 0o755);
    let path = file.path().join("input");
    std::fs::write(&path, "x").unwrap();
    let p = path.display().to_string();
    let r = records(&[call("i1", &now(), json!(["t"]), json!([denial("landlock", &p, &["read_file"], "read")]))]);
    let o = Offline::new("# the grants\nread = [] # none yet\n", &borrowed(&r));
    let policy = o.policies.join("t.toml");
    mode(&policy, 0o600);
    let (code, shown, _) = o.suggest(&[]);
    assert_eq!(code, Some(0));
    let (code, written, stderr) = o.suggest(&["--write"]);
    assert_eq!((code, &written), (Some(0), &shown), "{stderr}");
    assert!(stderr.contains("run `cordon reload`"), "{stderr}");
    assert_eq!(std::fs::metadata(&policy).unwrap().permissions().mode() & 0o7777, 0o600);
    let text = std::fs::read_to_string(&policy).unwrap();
    assert!(text.contains("# the grants\nread = [\n  # suggested: read_file denied once"), "comments kept: {text}");
    assert!(text.contains(&format!("  {},\n] # none yet\n", q(&path))), "{text}");
    // No temporary file is left beside it.
    let names: Vec<String> = std::fs::read_dir(&o.policies)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["t.toml"]);
    let (code, _, stderr) = o.suggest(&[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("already granted (read has "), "{stderr}");
}
