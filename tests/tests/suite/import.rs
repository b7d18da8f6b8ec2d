//! `cordon import`: the seeds' own example configs (CtxNest's annotated `ctxnest.json`, Gandalf's
//! `registry.json` examples, in tests/fixtures/import/) imported by the real `cordon`, checked with
//! `cordon policy check`, loaded by the real `cordond`, and called with the seeds' own example
//! calls: the same behaviour, or the documented stricter one. Bad input of every kind gets an
//! error that says what to do, and nothing half-written.

use std::path::{Path, PathBuf};

use cordon_tests::{Daemon, Output, cordon_at};
use serde_json::json;

const PLACEHOLDER: &str = "TODO: review this tool and say why agents may run it";

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join("import").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `cordon ARGS` offline (the socket is never used).
fn cordon(args: &[&str]) -> Output {
    cordon_at(Path::new("/nonexistent/cordon.sock"), args)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// What an admin does after reviewing: writes the reasons.
fn review(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(PLACEHOLDER), "{text}");
    std::fs::write(path, text.replace(PLACEHOLDER, "reviewed after the import")).unwrap();
}

/// A project directory `webapp` with the seed's `ctxnest.json` and its `tmp/scratch`.
fn ctxnest_project(json: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::Builder::new().prefix("cordon-import-").tempdir().unwrap();
    let root = dir.path().join("webapp");
    std::fs::create_dir_all(root.join("tmp/scratch")).unwrap();
    std::fs::write(root.join("ctxnest.json"), json).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    (dir, root, policies)
}

fn tool_names(d: &Daemon, all: bool) -> Vec<String> {
    let out = if all { d.cordon(&["tools", "--all", "--json"]) } else { d.cordon(&["tools", "--json"]) };
    out.assert_code(0);
    out.json()["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
}

/// The seed's annotated example, as written: imported under the project's namespace, refused
/// until the reasons are written, then loaded; tools are `webapp__<tool>` as CtxNest exposed them,
/// the disabled one is hidden, and remove-temp behaves as in CtxNest (argSeparator, the strict
/// pattern, the empty string passing it and dropping the element).
#[test]
fn the_ctxnest_example_imports_and_behaves_as_in_ctxnest() {
    let (dir, root, policies) = ctxnest_project(&fixture("ctxnest.json"));
    let out_file = policies.join("webapp.toml");
    let out = cordon(&["import", "ctxnest", s(&root.join("ctxnest.json")), "-o", s(&out_file)]);
    out.assert_code(0);
    assert!(out.stdout.contains("5 tool(s)") && out.stdout.contains("cordon policy check"), "{out:#?}");
    let text = std::fs::read_to_string(&out_file).unwrap();
    for want in [
        "namespace = \"webapp\"",
        "timeout = \"120s\"",
        "timeout = \"180s\"",
        "max_output = \"100000B\"",
        "confirm = \"agent\"",
        "disabled = true",
        "arg_separator = true",
        &format!("working_dir = \"{}\"", s(&root.join("tmp/scratch"))),
        "pattern = \"(?:[a-zA-Z0-9._-]+)?\"",
        "pattern = \"[a-zA-Z0-9 _/-]*\"",
    ] {
        assert!(text.contains(want), "{want} missing:\n{text}");
    }
    // No temporary file is left beside it.
    let names: Vec<_> = std::fs::read_dir(&policies).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["webapp.toml"]);

    // Not reviewed yet: refused, each tool named, with what to do.
    let check = cordon(&["policy", "check", s(&out_file)]);
    check.assert_code(65);
    assert_eq!(check.stderr.matches("`reason` is still a placeholder").count(), 5, "{check:#?}");
    assert!(check.stderr.contains("[tools.remove-temp] `reason` is still a placeholder"), "{check:#?}");
    review(&out_file);
    let check = cordon(&["policy", "check", s(&out_file)]);
    check.assert_code(0);
    assert!(check.stdout.contains("ok: 5 tool(s) in 1 file(s)"), "{check:#?}");

    let d = Daemon::start_in(dir, policies, &[]);
    let visible = tool_names(&d, false);
    assert!(visible.contains(&"webapp__remove-temp".to_string()), "{visible:?}");
    assert!(!visible.iter().any(|n| n == "webapp__deploy-production"), "disabled tools are never exposed: {visible:?}");
    assert!(tool_names(&d, true).contains(&"webapp__deploy-production".to_string()));

    // remove-temp: `rm -- NAME` in tmp/scratch.
    std::fs::write(root.join("tmp/scratch/old.log"), "x").unwrap();
    let (out, j) = d.run_json("webapp__remove-temp", &json!({ "name": "old.log" }));
    out.assert_code(0);
    assert_eq!(j["argv"], json!(["rm", "--", "old.log"]), "{j:#}");
    assert!(!root.join("tmp/scratch/old.log").exists());
    // The pattern admits a leading dash, as CtxNest's does: argSeparator keeps it an operand.
    let (_, j) = d.run_json("webapp__remove-temp", &json!({ "name": "-rf" }));
    assert_eq!(j["argv"], json!(["rm", "--", "-rf"]), "{j:#}");
    // The pattern refuses what CtxNest's refuses.
    for bad in ["../x", "a b", "x/y"] {
        let (out, j) = d.run_json("webapp__remove-temp", &json!({ "name": bad }));
        out.assert_code(65);
        assert_eq!(j["error"]["code"], "INVALID_FIELD_VALUE", "{bad}: {j:#}");
    }
    // The empty string passes every CtxNest pattern and drops its element: `rm` alone runs (and
    // fails with its own message), as in CtxNest.
    let (_, j) = d.run_json("webapp__remove-temp", &json!({ "name": "" }));
    assert_eq!(j["argv"], json!(["rm"]), "{j:#}");
    assert_ne!(j["exit_code"], 0, "{j:#}");
    // Missing the required param: refused before anything runs.
    let (out, j) = d.run_json("webapp__remove-temp", &json!({}));
    out.assert_code(65);
    assert_eq!(j["error"]["code"], "MISSING_REQUIRED_FIELD");
}

/// The same example with runnable programs in place of git, npx and gcloud (which a test host
/// lacks): run-tests' optional filter (empty default dropped, pattern enforced), deploy-staging's
/// `confirm: true` as an agent token, and `env` with the keys cordon forbids dropped. Two
/// projects' `run-tests` stay apart through their namespaces.
#[test]
fn the_ctxnest_example_runs_with_runnable_programs_and_two_projects_stay_apart() {
    let seed = fixture("ctxnest.json")
        .replace("[\"git\", \"ls-files\"]", "[\"/usr/bin/env\"]")
        .replace("\"npx\"", "\"/bin/echo\"")
        .replace("\"gcloud\"", "\"/bin/echo\"");
    let mut doc: serde_json::Value = serde_json::from_str(&seed).unwrap();
    doc["tools"]["list-files"]["env"] =
        json!({ "GREETING": "hello", "PATH": "/evil", "LD_PRELOAD": "/evil.so", "DYLD_INSERT_LIBRARIES": "x" });
    let (dir, root, policies) = ctxnest_project(&doc.to_string());
    let json_file = root.join("ctxnest.json");
    let web = policies.join("web.toml");
    let api = policies.join("api.toml");
    cordon(&["import", s(&json_file), "--namespace", "web", "-o", s(&web)]).assert_code(0);
    cordon(&["import", "ctxnest", s(&json_file), "--namespace", "api", "-o", s(&api)]).assert_code(0);
    let text = std::fs::read_to_string(&web).unwrap();
    for dropped in ["PATH dropped", "LD_PRELOAD dropped", "DYLD_INSERT_LIBRARIES dropped"] {
        assert!(text.contains(dropped), "{dropped}:\n{text}");
    }
    review(&web);
    review(&api);
    let d = Daemon::start_in(dir, policies, &[]);
    let names = tool_names(&d, false);
    assert!(names.contains(&"web__run-tests".into()) && names.contains(&"api__run-tests".into()), "{names:?}");

    // run-tests: the empty default drops the filter element; a filter passes or is refused.
    let (out, j) = d.run_json("web__run-tests", &json!({}));
    out.assert_code(0);
    assert_eq!(j["stdout"], "vitest --reporter=verbose\n", "{j:#}");
    let (_, j) = d.run_json("api__run-tests", &json!({ "filter": "src/utils parse" }));
    assert_eq!(j["stdout"], "vitest --reporter=verbose src/utils parse\n", "{j:#}");
    let (out, j) = d.run_json("web__run-tests", &json!({ "filter": "x; rm -rf /" }));
    out.assert_code(65);
    assert_eq!(j["error"]["code"], "INVALID_FIELD_VALUE", "{j:#}");

    // deploy-staging: confirm: true is a token the agent redeems; nothing runs before.
    let (out, j) = d.run_json("web__deploy-staging", &json!({}));
    out.assert_code(3);
    let token = j["confirmation_required"]["token"].as_str().unwrap().to_string();
    let out = d.cordon(&["confirm", &token, "--json"]);
    out.assert_code(0);
    assert_eq!(out.json()["stdout"], "run deploy my-service --region us-central1\n");

    // env: the tool's own key is set; the forbidden ones were dropped, PATH is cordon's.
    let (out, j) = d.run_json("web__list-files", &json!({}));
    out.assert_code(0);
    let env = j["stdout"].as_str().unwrap();
    assert!(env.lines().any(|l| l == "GREETING=hello"), "{env}");
    assert!(!env.contains("LD_PRELOAD") && !env.contains("DYLD_") && !env.contains("/evil"), "{env}");
}

/// `--confirm human`: a person approves instead of the agent.
#[test]
fn ctxnest_confirm_can_be_a_human_approval() {
    let seed = fixture("ctxnest.json");
    let (_dir, root, policies) = ctxnest_project(&seed);
    let out = cordon(&["import", s(&root.join("ctxnest.json")), "--confirm", "human"]);
    out.assert_code(0);
    assert!(out.stdout.contains("confirm = \"human\"") && !out.stdout.contains("confirm = \"agent\""), "{out:#?}");
    // Without -o nothing is written anywhere.
    assert_eq!(std::fs::read_dir(&policies).unwrap().count(), 0);
}

/// The Gandalf examples as written: my-script's first word is not one of its allowed_commands,
/// which Gandalf's own check refuses. The import writes the two valid spells, lists my-script
/// with the reason (stderr, `--json`, and a comment holding its JSON at the end of the file) and
/// exits 4 (partial). Fixed as the message suggests (run the script through `sh`), all three
/// import and the exit is 0.
#[test]
fn the_gandalf_examples_import_or_are_refused_as_gandalf_would() {
    let dir = tempfile::tempdir().unwrap();
    let registry = dir.path().join("registry.json");
    std::fs::write(&registry, fixture("registry.json")).unwrap();
    let out_file = dir.path().join("spells.toml");
    let out = cordon(&["import", s(&registry), "-o", s(&out_file), "--json"]);
    out.assert_code(4);
    let j = out.json();
    assert_eq!(j["tools"], 2, "{j:#}");
    assert_eq!(j["skipped"][0]["entry"], "spell \"my-script\"", "{j:#}");
    let reason = j["skipped"][0]["reasons"][0].as_str().unwrap();
    assert!(
        reason.contains("spell \"my-script\": the command starts with \"./scripts/my-tool.sh\", which is not in its allowed_commands"),
        "{reason}"
    );
    let text = std::fs::read_to_string(&out_file).unwrap();
    assert!(text.contains("[tools.weather-api]") && text.contains("[tools.data-processor]"), "{text}");
    assert!(!text.contains("[tools.my-script]"), "{text}");
    assert!(text.contains("# NOT IMPORTED: 1 entry of"), "{text}");
    assert!(text.contains("#     \"command\": \"./scripts/my-tool.sh\","), "the skipped JSON is kept: {text}");
    // Without --json: each skipped entry on stderr, and what the exit code says.
    let out = cordon(&["import", s(&registry), "-o", s(&out_file), "--force"]);
    out.assert_code(4);
    assert!(
        out.stderr.contains("cordon: skipped: ")
            && out.stderr.contains("partial import: 2 tool(s) written, 1 entry skipped"),
        "{out:#?}"
    );

    let fixed = fixture("registry.json").replace("\"./scripts/my-tool.sh\"", "\"sh ./scripts/my-tool.sh\"");
    std::fs::write(&registry, fixed).unwrap();
    let out = cordon(&["import", "gandalf", s(&registry), "-o", s(&out_file), "--force"]);
    out.assert_code(0);
    let text = std::fs::read_to_string(&out_file).unwrap();
    for want in [
        "[tools.weather-api]",
        "command = [\"curl\", \"-X\", \"GET\", \"https://api.weather.com/v1/current\"]",
        "timeout = \"30s\"",
        "command = [\"sh\", \"./scripts/my-tool.sh\"]",
        "working_dir = \"/home/user/scripts\"",
        "read = [\"/home/user/scripts\"]",
        "timeout = \"60s\"",
        "timeout = \"120s\"",
        "args_env_prefix = \"SPELL_ARG_\"",
    ] {
        assert!(text.contains(want), "{want} missing:\n{text}");
    }
    review(&out_file);
    // /home/user/... does not exist here: the tools are unavailable, not invalid.
    let check = cordon(&["policy", "check", s(&out_file)]);
    check.assert_code(0);
    assert!(check.stdout.contains("ok: 3 tool(s)"), "{check:#?}");
}

/// A spell run for real: the seed's example call `{"location": "New York", "units": "metric"}`
/// reaches the command as SPELL_ARG_LOCATION and SPELL_ARG_UNITS once the admin declares them;
/// a key nobody declared and an object value are refused (stricter than Gandalf, documented).
#[test]
fn gandalf_arguments_arrive_as_spell_arg_variables() {
    let dir = tempfile::Builder::new().prefix("cordon-import-").tempdir().unwrap();
    let scripts = dir.path().join("scripts");
    std::fs::create_dir(&scripts).unwrap();
    std::fs::write(scripts.join("my-tool.sh"), "echo \"weather for $SPELL_ARG_LOCATION in $SPELL_ARG_UNITS\"\n")
        .unwrap();
    let registry = dir.path().join("registry.json");
    let doc = json!({ "spells": {
        "show-args": { "name": "show-args", "description": "Print the spell's environment",
            "command": "/usr/bin/env", "allowed_commands": ["env"] },
        "my-script": { "name": "my-script", "description": "Run custom script",
            "command": "sh ./my-tool.sh", "path": s(&scripts), "allowed_paths": [s(&scripts)],
            "allowed_commands": ["bash", "sh"], "timeout": 60 },
    }});
    std::fs::write(&registry, doc.to_string()).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    let out_file = policies.join("spells.toml");
    cordon(&["import", s(&registry), "-o", s(&out_file)]).assert_code(0);
    review(&out_file);
    // The admin declares the arguments the commands read (the import's comment shows how).
    let mut text = std::fs::read_to_string(&out_file).unwrap();
    for tool in ["show-args", "my-script"] {
        for p in ["location", "units"] {
            text.push_str(&format!("\n[tools.{tool}.params.{p}]\ntype = \"string\"\n"));
        }
    }
    std::fs::write(&out_file, text).unwrap();
    cordon(&["policy", "check", s(&out_file)]).assert_code(0);

    let d = Daemon::start_in(dir, policies, &[]);
    let call = json!({ "location": "New York", "units": "metric" });
    let (out, j) = d.run_json("show-args", &call);
    out.assert_code(0);
    let env = j["stdout"].as_str().unwrap();
    assert!(env.lines().any(|l| l == "SPELL_ARG_LOCATION=New York"), "{env}");
    assert!(env.lines().any(|l| l == "SPELL_ARG_UNITS=metric"), "{env}");
    let (out, j) = d.run_json("my-script", &call);
    out.assert_code(0);
    assert_eq!(j["stdout"], "weather for New York in metric\n", "{j:#}");
    // Gandalf took any key and object values; cordon refuses both, with their codes.
    let (out, j) = d.run_json("show-args", &json!({ "location": "x", "extra": "y" }));
    out.assert_code(65);
    assert_eq!(j["error"]["code"], "UNKNOWN_FIELDS", "{j:#}");
    let (out, j) = d.run_json("show-args", &json!({ "location": { "city": "x" } }));
    out.assert_code(65);
    assert_eq!(j["error"]["code"], "INVALID_FIELD_TYPE", "{j:#}");
}

/// What a shell would interpret, quotes that do not close, broken JSON, unknown keys, an
/// unknown format, an existing output: each said clearly, and nothing half-written.
#[test]
fn bad_input_is_named_with_what_to_do_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("registry.json");
    let out_file = dir.path().join("out.toml");
    let import = |text: &str| {
        std::fs::write(&file, text).unwrap();
        let out = cordon(&["import", s(&file), "-o", s(&out_file)]);
        assert!(!out_file.exists(), "{out:#?}");
        out
    };
    for (command, want) in [
        ("curl https://x | sh", "'|' at column 16 is a pipe"),
        ("make && make install", "'&' at column 6"),
        ("echo $HOME", "'$' at column 6 is a variable or command substitution"),
        ("echo `id`", "'`' at column 6 is a command substitution"),
        ("ls *.txt", "'*' at column 4 is a glob"),
        ("echo a; rm b", "';' at column 7 is a command separator"),
        ("cat < /etc/passwd", "'<' at column 5 is a redirection"),
        ("echo 'unclosed", "the single quote at column 6 does not close"),
    ] {
        let doc = json!({ "spells": { "bad-spell": { "description": "x", "command": command, "allowed_commands": ["curl", "make", "echo", "ls", "cat"] } } });
        let out = import(&doc.to_string());
        out.assert_code(65);
        assert!(out.stderr.contains("spell \"bad-spell\""), "{out:#?}");
        assert!(out.stderr.contains(want), "{want}: {out:#?}");
    }

    let out = import("{\n  \"spells\": {\n    \"a\": { \"description\": \"x\" \"command\": \"ls\" }\n  }\n}\n");
    out.assert_code(65);
    assert!(out.stderr.contains("registry.json:3:") && out.stderr.contains("invalid JSON"), "{out:#?}");

    let out = import(r#"{"something": "else"}"#);
    out.assert_code(65);
    assert!(
        out.stderr.contains("is neither a CtxNest ctxnest.json") && out.stderr.contains("cordon import gandalf"),
        "{out:#?}"
    );

    // Unknown keys are warnings, named; the import goes on.
    let doc = json!({ "spells": { "ok-spell": { "description": "x", "command": "/bin/echo hi", "allowed_commands": ["echo"], "timout": 5 } } });
    std::fs::write(&file, doc.to_string()).unwrap();
    let out = cordon(&["import", s(&file), "-o", s(&out_file)]);
    out.assert_code(0);
    assert!(
        out.stderr.contains("spell \"ok-spell\": unknown key \"timout\" ignored; did you mean \"timeout\"?"),
        "{out:#?}"
    );
    // An existing output is kept unless --force.
    let before = std::fs::read_to_string(&out_file).unwrap();
    std::fs::write(&out_file, "keep me").unwrap();
    let out = cordon(&["import", s(&file), "-o", s(&out_file)]);
    out.assert_code(2);
    assert!(out.stderr.contains("already exists; pass --force"), "{out:#?}");
    assert_eq!(std::fs::read_to_string(&out_file).unwrap(), "keep me");
    cordon(&["import", s(&file), "-o", s(&out_file), "--force"]).assert_code(0);
    assert_eq!(std::fs::read_to_string(&out_file).unwrap(), before);
    let out = cordon(&["import", "yaml", s(&file)]);
    out.assert_code(2);
    assert!(out.stderr.contains("unknown import format \"yaml\""), "{out:#?}");
}

/// JSON configs where cordon looks for policies: `policy check` names each with the import
/// command (a directory without *.toml is not a plain "ok"), a JSON file checked directly is an
/// error with the hint, and cordond logs the same hint.
#[test]
fn json_configs_in_the_policy_directory_say_how_to_import_them() {
    let dir = tempfile::Builder::new().prefix("cordon-import-").tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    let ctx = policies.join("ctxnest.json");
    std::fs::write(&ctx, fixture("ctxnest.json")).unwrap();
    std::fs::write(policies.join("registry.json"), fixture("registry.json")).unwrap();
    let out = cordon(&["policy", "check", s(&policies)]);
    out.assert_code(0);
    assert!(
        out.stderr.contains(&format!(
            "looks like a CtxNest config (ctxnest.json), which cordond does not read: convert it with `cordon import ctxnest {} -o {}`",
            s(&ctx),
            s(&policies.join("ctxnest.toml"))
        )),
        "{out:#?}"
    );
    assert!(out.stderr.contains("looks like a Gandalf spell registry"), "{out:#?}");
    assert!(out.stdout.contains("nothing to load: no policy file (*.toml) found; see the warnings above"), "{out:#?}");
    assert!(!out.stdout.contains("ok: 0 tool(s)"), "{out:#?}");

    let out = cordon(&["policy", "check", s(&ctx)]);
    out.assert_code(65);
    assert!(out.stderr.contains("cordon import ctxnest") && !out.stderr.contains("invalid TOML"), "{out:#?}");

    let d = Daemon::start_in(dir, policies, &[]);
    assert!(
        cordon_tests::eventually(std::time::Duration::from_secs(5), || d.log_text().contains("cordon import ctxnest")),
        "{}",
        d.log_text()
    );
}

/// `-o -` is standard output (as for `cordon init`): the same policy `-o FILE` writes, and no file
/// named `-` in the working directory, with `--force` too; `--json` then carries the policy.
#[test]
fn output_dash_is_standard_output_not_a_file_named_dash() {
    let dir = tempfile::tempdir().unwrap();
    let registry = dir.path().join("registry.json");
    let fixed = fixture("registry.json").replace("\"./scripts/my-tool.sh\"", "\"sh ./scripts/my-tool.sh\"");
    std::fs::write(&registry, fixed).unwrap();
    let out_file = dir.path().join("spells.toml");
    cordon(&["import", "gandalf", s(&registry), "-o", s(&out_file)]).assert_code(0);
    let written = std::fs::read_to_string(&out_file).unwrap();
    let import = |args: &[&str]| -> Output {
        std::process::Command::new(cordon_tests::bin("cordon"))
            .current_dir(dir.path())
            .args(["--socket", "/nonexistent/cordon.sock", "import", "gandalf"])
            .arg(&registry)
            .args(args)
            .output()
            .unwrap()
            .into()
    };
    for args in [&["-o", "-"][..], &["--output", "-", "--force"], &["--output=-"]] {
        let out = import(args);
        out.assert_code(0);
        assert_eq!(out.stdout, written, "{args:?}: the policy on stdout");
        assert!(!dir.path().join("-").exists(), "{args:?}: no file named `-`");
    }
    let out = import(&["-o", "-", "--json"]);
    out.assert_code(0);
    let j = out.json();
    assert_eq!((j["output"].clone(), j["policy"].as_str()), (json!(null), Some(written.as_str())), "{j}");
    assert!(!dir.path().join("-").exists());
}

/// `git` in `dir`, as root, with no user or system config (the test's own git, not the tool's).
fn git(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t.invalid")
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The agent user's home with a `~/.gitconfig` in it, as a developer's account has: git in a
/// sandbox that may not read it exits 128 unless the import set GIT_CONFIG_GLOBAL.
fn agent_home_with_gitconfig() {
    use std::os::unix::fs::PermissionsExt as _;
    let home = Path::new("/home").join(cordon_tests::agent::AGENT);
    std::fs::create_dir_all(&home).unwrap();
    let uid = cordon_tests::agent::id("-u", cordon_tests::agent::AGENT);
    let gid = cordon_tests::agent::id("-g", cordon_tests::agent::AGENT);
    std::os::unix::fs::chown(&home, Some(uid), Some(gid)).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    let config = home.join(".gitconfig");
    std::fs::write(&config, "[user]\n\tname = agent\n\temail = agent@t.invalid\n").unwrap();
    std::os::unix::fs::chown(&config, Some(uid), Some(gid)).unwrap();
}

/// What an admin does after reviewing, for a file whose tools agents call: the reasons, and the
/// agent user admitted to every tool of the file.
fn review_for_agent(path: &Path) {
    review(path);
    let mut text = std::fs::read_to_string(path).unwrap();
    text.push_str(&format!("\n[defaults]\nallow = {{ users = [\"{}\"] }}\n", cordon_tests::agent::AGENT));
    std::fs::write(path, text).unwrap();
}

/// The upstream projects' documented examples (CtxNest's annotated `ctxnest.json`, Gandalf's
/// three spells) imported as written, checked, loaded by a real cordond and run, by the
/// project's owner (root, with its ~/.gitconfig) and by the unprivileged agent user (with a
/// ~/.gitconfig of its own, calling a repository it does not own):
///
/// - list-files (`git ls-files`): runs for both, the tracked files listed;
/// - remove-temp (`rm -- NAME`): runs for both, the file gone;
/// - deploy-production: disabled, never exposed;
/// - my-script: skipped by the import (its program is not in its allowed_commands), listed, exit 4;
/// - weather-api: gets `network = { hosts = ["api.weather.com:443"] }`; not run (the test sends
///   nothing off this machine): a spell of the same shape against a loopback server runs instead,
///   through the derived grant;
/// - data-processor: unavailable here (its script and path are the example's own machine's);
/// - run-tests (npx vitest) and deploy-staging (gcloud): not run: vitest is not installed and npx
///   would fetch it from the registry; gcloud needs credentials and Google's API.
///
/// Then both imported files lose a tool with `cordon tool remove` and keep the others.
#[test]
fn the_seed_examples_import_and_run_as_the_owner_and_as_an_agent() {
    use std::os::unix::fs::PermissionsExt as _;
    if !cordon_tests::is_root() {
        cordon_tests::skip!(cordon_tests::Skip::NotRoot, "needs root (the agent user, run as the caller)");
        return;
    }
    cordon_tests::agent::ensure();
    agent_home_with_gitconfig();

    let dir = tempfile::Builder::new().prefix("cordon-import-e2e-").tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = dir.path().join("webapp");
    std::fs::create_dir_all(root.join("tmp/scratch")).unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("ctxnest.json"), fixture("ctxnest.json")).unwrap();
    std::fs::write(root.join("README.md"), "webapp\n").unwrap();
    std::fs::write(root.join("src/app.js"), "console.log('hi')\n").unwrap();
    git(&root, &["init", "-q", "-b", "main"]);
    git(&root, &["add", "README.md", "src/app.js", "ctxnest.json"]);
    git(&root, &["commit", "-q", "-m", "initial"]);
    // The agent may write the scratch directory (DAC); the sandbox grants the rest.
    std::fs::set_permissions(root.join("tmp/scratch"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();

    // CtxNest: every tool of the example translates.
    let web = policies.join("webapp.toml");
    cordon(&["import", s(&root.join("ctxnest.json")), "-o", s(&web)]).assert_code(0);
    let text = std::fs::read_to_string(&web).unwrap();
    for want in [
        "GIT_CONFIG_GLOBAL = \"/dev/null\"",
        "GIT_CONFIG_NOSYSTEM = \"1\"",
        "GIT_CONFIG_KEY_0 = \"safe.directory\"",
        &format!("GIT_CONFIG_VALUE_0 = \"{}\"", s(&root)),
        "npm_config_cache = \"/tmp/.npm\"",
    ] {
        assert!(text.contains(want), "{want} missing:\n{text}");
    }
    review_for_agent(&web);
    cordon(&["policy", "check", s(&web)]).assert_code(0);

    // Gandalf: my-script is skipped (partial, exit 4); two loopback spells are added beside the
    // example's, with the same shapes as weather-api and as a git spell.
    let port = cordon_tests::hello_upstream();
    let mut registry: serde_json::Value = serde_json::from_str(&fixture("registry.json")).unwrap();
    registry["spells"]["local-api"] = json!({ "name": "local-api", "description": "Get local data",
        "command": format!("curl -sS \"http://127.0.0.1:{port}/v1/current?q=$SPELL_ARG_LOCATION\""),
        "allowed_commands": ["curl"] });
    registry["spells"]["repo-files"] = json!({ "name": "repo-files", "description": "List the repository",
        "command": "git ls-files", "path": s(&root), "allowed_paths": [s(&root)], "allowed_commands": ["git"] });
    registry["spells"]["greet"] = json!({ "name": "greet", "description": "Greet someone",
        "command": "sh -c \"echo hello $SPELL_ARG_WHO\"", "allowed_commands": ["sh"] });
    let registry_file = dir.path().join("registry.json");
    std::fs::write(&registry_file, registry.to_string()).unwrap();
    let spells = policies.join("spells.toml");
    let out = cordon(&["import", s(&registry_file), "-o", s(&spells), "--json"]);
    out.assert_code(4);
    let j = out.json();
    assert_eq!((j["tools"].clone(), j["skipped"].as_array().unwrap().len()), (json!(5), 1), "{j:#}");
    assert_eq!(j["skipped"][0]["entry"], "spell \"my-script\"");
    let text = std::fs::read_to_string(&spells).unwrap();
    for want in [
        "network = { hosts = [\"api.weather.com:443\"] }",
        &format!("network = {{ hosts = [\"127.0.0.1:{port}\"] }}"),
        "[tools.local-api.params.location]",
        "GIT_CONFIG_GLOBAL = \"/dev/null\"",
        "# NOT IMPORTED: 1 entry",
    ] {
        assert!(text.contains(want), "{want} missing:\n{text}");
    }
    review_for_agent(&spells);
    let check = cordon(&["policy", "check", s(&policies)]);
    check.assert_code(0);

    let d = Daemon::start_in(dir, policies.clone(), &["--socket-group", cordon_tests::agent::SOCKET_GROUP]);
    let call = |agent: bool, tool: &str, args: serde_json::Value| -> (Output, serde_json::Value) {
        let argv = ["run", tool, "--args-json", &args.to_string(), "--json"];
        let out = if agent { cordon_tests::agent::cordon(&d.socket, &argv) } else { d.cordon(&argv) };
        let j = out.json();
        (out, j)
    };
    for agent in [false, true] {
        let who = if agent { "agent" } else { "owner" };
        let (out, j) = call(agent, "webapp__list-files", json!({}));
        assert_eq!((out.code, j["exit_code"].clone()), (Some(0), json!(0)), "{who}: {j:#}");
        assert_eq!(j["stdout"], "README.md\nctxnest.json\nsrc/app.js\n", "{who}: {j:#}");
        let (out, j) = call(agent, "repo-files", json!({}));
        assert_eq!(
            (out.code, j["stdout"].clone()),
            (Some(0), json!("README.md\nctxnest.json\nsrc/app.js\n")),
            "{who}: {j:#}"
        );

        let doomed = root.join("tmp/scratch").join(format!("{who}.log"));
        std::fs::write(&doomed, "x").unwrap();
        let (out, j) = call(agent, "webapp__remove-temp", json!({ "name": format!("{who}.log") }));
        assert_eq!((out.code, j["exit_code"].clone()), (Some(0), json!(0)), "{who}: {j:#}");
        assert!(!doomed.exists(), "{who}");

        // The spell's $SPELL_ARG_LOCATION is the declared param `location`, substituted in the URL
        // whose host stays fixed (and granted).
        let (out, j) = call(agent, "local-api", json!({ "location": "NewYork" }));
        assert_eq!((out.code, j["stdout"].clone()), (Some(0), json!("hello from upstream\n")), "{who}: {j:#}");
        assert_eq!(j["argv"][2], format!("http://127.0.0.1:{port}/v1/current?q=NewYork"), "{who}: {j:#}");
        let (out, j) = call(agent, "local-api", json!({}));
        out.assert_code(65);
        assert_eq!(j["error"]["code"], "MISSING_REQUIRED_FIELD", "{who}: {j:#}");

        // The shell reads $SPELL_ARG_WHO from its environment: the value is never code.
        let (out, j) = call(agent, "greet", json!({ "who": "a; touch /tmp/pwned-$$" }));
        assert_eq!((out.code, j["stdout"].clone()), (Some(0), json!("hello a; touch /tmp/pwned-$$\n")), "{who}: {j:#}");

        let (out, j) = call(agent, "data-processor", json!({}));
        out.assert_code(69);
        assert_eq!(j["error"]["code"], "TOOL_UNAVAILABLE", "{who}: {j:#}");
        let (out, j) = call(agent, "webapp__deploy-production", json!({}));
        out.assert_code(66);
        assert_eq!(j["error"]["code"], "UNKNOWN_TOOL", "{who}: {j:#}");
    }

    // `cordon tool remove` on imported tools: each leaves its file with the others in it.
    let out = d.cordon(&["tool", "remove", "webapp__remove-temp"]);
    out.assert_code(0);
    assert!(out.stdout.contains("removed webapp__remove-temp"), "{out:#?}");
    let text = std::fs::read_to_string(policies.join("webapp.toml")).unwrap();
    assert!(!text.contains("remove-temp") && text.contains("[tools.list-files]"), "{text}");
    let out = d.cordon(&["tool", "remove", "weather-api"]);
    out.assert_code(0);
    let text = std::fs::read_to_string(policies.join("spells.toml")).unwrap();
    assert!(!text.contains("[tools.weather-api]") && text.contains("[tools.local-api]"), "{text}");
    assert!(text.contains("# NOT IMPORTED: 1 entry"), "the skipped entries stay listed: {text}");
    let names = tool_names(&d, true);
    assert!(!names.iter().any(|n| n == "webapp__remove-temp" || n == "weather-api"), "{names:?}");
    let (out, j) = call(true, "webapp__list-files", json!({}));
    assert_eq!((out.code, j["exit_code"].clone()), (Some(0), json!(0)), "{j:#}");
    let (out, _) = call(false, "webapp__remove-temp", json!({ "name": "x" }));
    out.assert_code(66);
}

/// CtxNest patterns with inline flags: `(?i)` translated (and enforced case-insensitively, as
/// re2 did), `(?x)` (which re2 refuses too) skips that tool alone with the reason: exit 4, the
/// rest written and run.
#[test]
fn inline_regex_flags_are_translated_or_skip_only_their_tool() {
    let doc = json!({ "version": "1", "tools": {
        "greet": { "description": "Echo a word", "command": ["/bin/echo", "{{word}}"],
            "params": { "word": { "type": "string", "required": true, "pattern": "(?i)^[a-z]+$" } } },
        "spaced": { "description": "x", "command": ["/bin/echo", "{{word}}"],
            "params": { "word": { "type": "string", "pattern": "(?x)^ [a-z]+ $" } } },
    }});
    let (dir, root, policies) = ctxnest_project(&doc.to_string());
    let out_file = policies.join("web.toml");
    let out = cordon(&["import", s(&root.join("ctxnest.json")), "-o", s(&out_file)]);
    out.assert_code(4);
    assert!(
        out.stderr.contains("tools.spaced.params.word.pattern \"(?x)^ [a-z]+ $\" cannot be translated: the flag (?x) is not one re2 accepts"),
        "{out:#?}"
    );
    let text = std::fs::read_to_string(&out_file).unwrap();
    assert!(text.contains("pattern = \"(?:[A-Za-z\u{17F}\u{212A}]+)?\""), "{text}");
    assert!(!text.contains("[tools.spaced]") && text.contains("# NOT IMPORTED: 1 entry"), "{text}");
    review(&out_file);
    cordon(&["policy", "check", s(&out_file)]).assert_code(0);
    let d = Daemon::start_in(dir, policies, &[]);
    // "" passes every CtxNest pattern (and drops its element), as before.
    for (word, code) in [("Hello", 0), ("hello", 0), ("HELLO", 0), ("he-llo", 65), ("", 0)] {
        let (out, j) = d.run_json("webapp__greet", &json!({ "word": word }));
        out.assert_code(code);
        if code == 0 {
            assert_eq!(j["stdout"], format!("{word}\n"), "{j:#}");
        }
    }
}
