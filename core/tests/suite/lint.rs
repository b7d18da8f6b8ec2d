//! Foot-gun lints of `policy check` (warnings: the file loads) and the policy's own examples
//! (`[[tools.NAME.examples]]` / `[[tools.NAME.refuse]]`: a failing one is an error).

use std::path::PathBuf;

use cordon_core::policy::examples::Outcome;
use cordon_core::policy::{Host, LoadError, PolicySet, Severity, load_sources, test_sources};

fn host() -> Host {
    Host::new(false, 6)
}

fn load(text: &str) -> Result<PolicySet, LoadError> {
    load_sources(&[(PathBuf::from("t.toml"), text.to_string())], &host())
}

/// The warnings of a policy that must load.
#[track_caller]
fn warnings(tools: &str) -> Vec<String> {
    let text = format!("version = 1\n{tools}");
    match load(&text) {
        Ok(set) => set
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Warning && d.message.contains(" ["))
            .map(ToString::to_string)
            .collect(),
        Err(e) => panic!("expected the policy to load, got:\n{e}"),
    }
}

/// A tool table with `command` and params (string params with the given patterns).
fn tool(command: &str, extra: &str, params: &[(&str, &str)]) -> String {
    let mut t = format!("[tools.t]\ndescription = \"d\"\nreason = \"r\"\ncommand = {command}\n{extra}\n");
    for (name, def) in params {
        t.push_str(&format!("[tools.t.params.{name}]\n{def}\n"));
    }
    t
}

#[track_caller]
fn assert_lint(w: &[String], lint: &str, fix: &str) {
    assert!(
        w.iter().any(|m| m.contains(&format!("[{lint}:")) && m.contains(fix)),
        "expected lint {lint} with {fix:?}, got {w:#?}"
    );
}

#[track_caller]
fn assert_clean(w: &[String]) {
    assert!(w.is_empty(), "expected no lint, got {w:#?}");
}

const STR: &str = "type = \"string\"\nrequired = true\npattern = \".*\"";
const SAFE_STR: &str = "type = \"string\"\nrequired = true\npattern = \"[a-z]+\"";

#[test]
fn interpreter_code_flag_followed_by_a_placeholder() {
    for command in [
        r#"["sh", "-c", "{{x}}"]"#,
        r#"["bash", "-c", "ls {{x}}"]"#,
        r#"["/bin/sh", "-ec", "ls {{x}}"]"#,
        r#"["python3", "-c", "print({{x}})"]"#,
        r#"["node", "-e", "{{x}}"]"#,
        r#"["perl", "-e", "{{x}}"]"#,
        r#"["ruby", "-e", "{{x}}"]"#,
        r#"["env", "FOO=1", "bash", "-c", "{{x}}"]"#,
    ] {
        let w = warnings(&tool(command, "", &[("x", SAFE_STR)]));
        assert_lint(&w, "interpreter-code", "pass the value as a separate argument");
        // At the element that holds the code.
        assert!(w[0].starts_with("t.toml:5:"), "{command}: {w:?}");
    }
    // The safe idiom: the code is literal, the value is a positional argument.
    assert_clean(&warnings(&tool(r#"["sh", "-c", "grep -- \"$1\" f", "sh", "{{x}}"]"#, "", &[("x", SAFE_STR)])));
    assert_clean(&warnings(&tool(
        r#"["python3", "-c", "import sys; print(sys.argv[1])", "{{x}}"]"#,
        "",
        &[("x", SAFE_STR)],
    )));
}

/// The code flag bundled with other short flags (`python3 -Ic`, `perl -le`), the code attached
/// to its flag (`python3 -c{{x}}`, `node --eval={{x}}`), and a shell's `-c` followed by more
/// options or `--` before its code operand (`sh -c -- {{x}}`, `bash -c -e {{x}}`).
#[test]
fn interpreter_code_bundled_attached_or_after_more_options() {
    for command in [
        r#"["python3", "-Ic", "{{x}}"]"#,
        r#"["python3", "-I", "-c", "{{x}}"]"#,
        r#"["python3", "-c{{x}}"]"#,
        r#"["perl", "-le", "{{x}}"]"#,
        r#"["perl", "-Mstrict", "-e", "{{x}}"]"#,
        r#"["perl", "-e{{x}}"]"#,
        r#"["ruby", "-ne", "{{x}}"]"#,
        r#"["node", "--eval={{x}}"]"#,
        r#"["node", "-pe", "{{x}}"]"#,
        r#"["node", "--print={{x}}"]"#,
        r#"["sh", "-c", "--", "{{x}}"]"#,
        r#"["bash", "-c", "-e", "{{x}}"]"#,
        r#"["bash", "-lc", "{{x}}"]"#,
        r#"["sh", "-xc", "{{x}}"]"#,
        r#"["env", "sh", "-c", "{{x}}"]"#,
        r#"["busybox", "sh", "-c", "{{x}}"]"#,
        r#"["sed", "--expression={{x}}"]"#,
        r#"["php", "-r{{x}}"]"#,
    ] {
        let w = warnings(&tool(command, "", &[("x", SAFE_STR)]));
        assert!(w.iter().any(|m| m.contains("[interpreter-code:")), "{command}: {w:#?}");
    }
    // Not code: an argument of the script after the code, and flags without code.
    assert_clean(&warnings(&tool(r#"["python3", "-I", "script.py", "{{x}}"]"#, "", &[("x", SAFE_STR)])));
    assert_clean(&warnings(&tool(r#"["python3", "-c", "print(1)", "{{x}}"]"#, "", &[("x", SAFE_STR)])));
    assert_clean(&warnings(&tool(r#"["sh", "-c", "echo \"$1\"", "sh", "{{x}}"]"#, "", &[("x", SAFE_STR)])));
    assert_clean(&warnings(&tool(r#"["perl", "-w", "script.pl", "{{x}}"]"#, "", &[("x", SAFE_STR)])));
}

#[test]
fn leading_dash_not_behind_a_separator() {
    let w = warnings(&tool(r#"["rm", "-rf", "{{p}}"]"#, "", &[("p", STR)]));
    assert_lint(&w, "leading-dash", "arg_separator = true");
    assert!(w[0].contains("admits \"-\""), "{w:?}");
    let w = warnings(&tool(r#"["git", "-C", "{{dir}}", "status"]"#, "", &[("dir", STR)]));
    assert_lint(&w, "leading-dash", "start it with [^-]");
    // Negative numbers read as options too.
    let w =
        warnings(&tool(r#"["head", "-n", "{{n}}"]"#, "", &[("n", "type = \"integer\"\nmin = -5\nrequired = true")]));
    assert_lint(&w, "leading-dash", "{{n}}");
    // Not flagged: a pattern without a leading dash, a separator, arg_separator, a joined
    // option, a path, no pattern at all (validation refuses a leading dash), grep -e.
    assert_clean(&warnings(&tool(r#"["rm", "-rf", "{{p}}"]"#, "", &[("p", SAFE_STR)])));
    assert_clean(&warnings(&tool(r#"["rm", "-rf", "--", "{{p}}"]"#, "", &[("p", STR)])));
    assert_clean(&warnings(&tool(r#"["rm", "-rf", "{{p}}"]"#, "arg_separator = true", &[("p", STR)])));
    assert_clean(&warnings(&tool(r#"["tool", "--file={{p}}"]"#, "", &[("p", STR)])));
    assert_clean(&warnings(&tool(r#"["rm", "{{p}}"]"#, "", &[("p", "type = \"path\"\nrequired = true")])));
    assert_clean(&warnings(&tool(r#"["rm", "{{p}}"]"#, "", &[("p", "type = \"string\"\nrequired = true")])));
    assert_clean(&warnings(&tool(r#"["grep", "-e", "{{p}}", "--", "."]"#, "", &[("p", STR)])));
}

#[test]
fn program_choosing_placeholders() {
    for command in [
        r#"["/usr/bin/env", "{{prog}}"]"#,
        r#"["env", "A=1", "{{prog}}", "x"]"#,
        r#"["timeout", "10s", "{{prog}}"]"#,
        r#"["nice", "-n", "5", "{{prog}}"]"#,
        r#"["sudo", "-u", "{{prog}}"]"#,
        r#"["xargs", "{{prog}}"]"#,
    ] {
        let w = warnings(&tool(command, "", &[("prog", SAFE_STR)]));
        assert_lint(&w, "program-choice", "name the program literally");
    }
    assert_clean(&warnings(&tool(r#"["env", "A=1", "/usr/bin/ls", "{{prog}}"]"#, "", &[("prog", SAFE_STR)])));
    assert_clean(&warnings(&tool(r#"["timeout", "10s", "ls", "{{prog}}"]"#, "", &[("prog", SAFE_STR)])));
}

#[test]
fn write_of_system_directories() {
    let text = "version = 1\n".to_string() + &tool(r#"["ls"]"#, "write = [\"/usr/local\", \"/etc/cron.d\"]", &[]);
    let set = load(&text).unwrap();
    let w: Vec<String> = set.diagnostics.iter().map(ToString::to_string).collect();
    assert!(
        w.iter().any(|m| m.contains("write \"/usr/local\" lets the tool change the whole system directory")),
        "{w:#?}"
    );
    assert!(
        w.iter().any(|m| m.contains("write \"/etc/cron.d\" lets the tool change the system's configuration")),
        "{w:#?}"
    );
    // Still errors: `/` and the kernel's trees.
    let text = "version = 1\n".to_string() + &tool(r#"["ls"]"#, "write = [\"/\"]", &[]);
    assert!(load(&text).is_err());
    let text = "version = 1\n".to_string() + &tool(r#"["ls"]"#, "write = [\"/srv/data\"]", &[]);
    assert!(load(&text).unwrap().diagnostics.iter().all(|d| !d.message.contains("write \"/srv/data\"")));
}

#[test]
fn write_and_exec_of_one_tree() {
    let w = warnings(&tool(r#"["make"]"#, "write = [\"/srv/build\"]\nexec = [\"/srv/build/bin\"]", &[]));
    assert_lint(&w, "write-exec", "grant exec only to directories the tool cannot write");
    let w = warnings(&tool(r#"["/srv/build/tool"]"#, "write = [\"/srv/build\"]", &[]));
    assert_lint(&w, "write-exec", "can replace the program it runs");
    assert_clean(&warnings(&tool(r#"["make"]"#, "write = [\"/srv/build\"]\nexec = [\"/srv/tools\"]", &[])));
    // A reviewed overlap is accepted.
    assert_clean(&warnings(&tool(
        r#"["make"]"#,
        "write = [\"/srv/build\"]\nexec = [\"/srv/build\"]\naccept_warnings = [\"write-exec\"]",
        &[],
    )));
    // An unknown lint name is an error that lists the names.
    let text = "version = 1\n".to_string() + &tool(r#"["make"]"#, "accept_warnings = [\"write-exc\"]", &[]);
    let e = load(&text).unwrap_err().to_string();
    assert!(e.contains("unknown lint \"write-exc\" in accept_warnings; did you mean \"write-exec\"?"), "{e}");
}

#[test]
fn unix_sockets_as_root_or_of_a_container_engine() {
    let w = warnings(&tool(r#"["ls"]"#, "unix_sockets = [\"/run/app.sock\"]\nrun_as = \"root\"", &[]));
    assert_lint(&w, "root-socket", "run the tool as a dedicated user");
    let w = warnings(&tool(r#"["docker", "ps"]"#, "unix_sockets = [\"/var/run/docker.sock\"]", &[]));
    assert_lint(&w, "engine-socket", "root on the host");
    let w = warnings(&tool(r#"["podman", "ps"]"#, "unix_sockets = [\"/run/podman/podman.sock\"]", &[]));
    assert_lint(&w, "engine-socket", "root on the host");
    assert_clean(&warnings(&tool(r#"["ls"]"#, "unix_sockets = [\"/run/app.sock\"]\nrun_as = \"nobody\"", &[])));
}

#[test]
fn high_danger_open_to_everyone_without_confirmation() {
    let w = warnings(&tool(r#"["ls"]"#, "danger = \"high\"\nallow = { groups = [\"users\"] }", &[]));
    assert_lint(&w, "open-high-danger", "confirm = \"human\"");
    assert_clean(&warnings(&tool(
        r#"["ls"]"#,
        "danger = \"high\"\nconfirm = \"human\"\nallow = { groups = [\"users\"] }",
        &[],
    )));
    assert_clean(&warnings(&tool(r#"["ls"]"#, "danger = \"high\"\nallow = { users = [\"alice\"] }", &[])));
    assert_clean(&warnings(&tool(r#"["ls"]"#, "danger = \"moderate\"\nallow = { groups = [\"users\"] }", &[])));
}

#[test]
fn a_grant_beneath_another_tools_write_root_across_files() {
    let a = "version = 1\n[tools.writer]\ndescription = \"d\"\nreason = \"r\"\ncommand = [\"ls\"]\nwrite = [\"/tmp/cordon-lint-w\"]\n";
    let b = "version = 1\n[tools.reader]\ndescription = \"d\"\nreason = \"r\"\ncommand = [\"ls\"]\nread = [\"/tmp/cordon-lint-w/sub\"]\n";
    let set =
        load_sources(&[(PathBuf::from("a.toml"), a.into()), (PathBuf::from("b.toml"), b.into())], &host()).unwrap();
    let w: Vec<String> = set.diagnostics.iter().map(ToString::to_string).collect();
    assert!(
        w.iter().any(|m| m.starts_with("b.toml:2:1: warning: tool \"reader\": read path /tmp/cordon-lint-w/sub lies beneath /tmp/cordon-lint-w, a write root of tool \"writer\"")),
        "{w:#?}"
    );
}

const GREP: &str = r#"version = 1
[tools.grep]
description = "d"
reason = "r"
command = ["grep", "-rn", "--", "{{pattern}}", "{{path}}"]
working_dir = "/srv"

[tools.grep.params.pattern]
type = "string"
pattern = "[a-z]+"
required = true

[tools.grep.params.path]
type = "path"
default = "."
"#;

#[test]
fn examples_that_pass_load_and_report_their_argv() {
    let text = format!(
        "{GREP}\n[[tools.grep.examples]]\nargs = {{ pattern = \"x\", path = \"src\" }}\nargv = [\"grep\", \"-rn\", \"--\", \"x\", \"/srv/src\"]\n\n[[tools.grep.examples]]\nargs = {{ pattern = \"y\" }}\n\n[[tools.grep.refuse]]\nargs = {{ pattern = \"-rf\" }}\ncode = \"INVALID_FIELD_VALUE\"\n\n[[tools.grep.refuse]]\nargs = {{}}\ncode = \"MISSING_REQUIRED_FIELD\"\n"
    );
    let set = load(&text).unwrap();
    assert_eq!(set.tools[0].examples.len(), 4);
    let report = test_sources(&[(PathBuf::from("t.toml"), text)]);
    assert!(report.diagnostics.iter().all(|d| !d.is_error()), "{:?}", report.diagnostics);
    let outcomes: Vec<&Outcome> = report.results.iter().map(|r| &r.outcome).collect();
    assert_eq!(outcomes[0], &Outcome::Passed { detail: r#"["grep","-rn","--","x","/srv/src"]"#.into() });
    assert!(outcomes.iter().all(|o| o.passed()), "{outcomes:#?}");
    assert_eq!((report.results[0].line, report.results[2].refuse), (17, true));
}

#[test]
fn an_example_whose_argv_differs_fails_the_load_at_its_position() {
    let text =
        format!("{GREP}\n[[tools.grep.examples]]\nargs = {{ pattern = \"x\" }}\nargv = [\"grep\", \"-rn\", \"x\"]\n");
    let e = load(&text).unwrap_err().to_string();
    assert!(
        e.contains("t.toml:17:1: example of tool \"grep\" resolves to [\"grep\",\"-rn\",\"--\",\"x\",\"/srv\"], not the expected argv [\"grep\",\"-rn\",\"x\"]; fix `argv` or the command"),
        "{e}"
    );
    // `policy test` reports it as a failed example, not as a problem of the file.
    let report = test_sources(&[(PathBuf::from("t.toml"), text)]);
    assert!(report.diagnostics.iter().all(|d| !d.is_error()), "{:?}", report.diagnostics);
    assert!(!report.results[0].outcome.passed());
}

#[test]
fn an_accepted_example_that_is_refused_fails() {
    let text = format!("{GREP}\n[[tools.grep.examples]]\nargs = {{ pattern = \"-x\" }}\n");
    let e = load(&text).unwrap_err().to_string();
    assert!(e.contains("example of tool \"grep\" is refused (INVALID_FIELD_VALUE: "), "{e}");
    assert!(e.contains("it must be accepted"), "{e}");
}

#[test]
fn a_refuse_example_with_another_code_or_accepted_fails() {
    let text = format!("{GREP}\n[[tools.grep.refuse]]\nargs = {{ pattern = 5 }}\ncode = \"INVALID_FIELD_VALUE\"\n");
    let e = load(&text).unwrap_err().to_string();
    assert!(e.contains("t.toml:17:1: refuse example of tool \"grep\" is refused with INVALID_FIELD_TYPE"), "{e}");
    assert!(e.contains("not the expected INVALID_FIELD_VALUE"), "{e}");
    let text =
        format!("{GREP}\n[[tools.grep.refuse]]\nargs = {{ pattern = \"ok\" }}\ncode = \"INVALID_FIELD_VALUE\"\n");
    let e = load(&text).unwrap_err().to_string();
    assert!(e.contains("refuse example of tool \"grep\" is accepted (it resolves to"), "{e}");
    // A code that is no validation code is a plain error of the file.
    let text = format!("{GREP}\n[[tools.grep.refuse]]\nargs = {{}}\ncode = \"BUSY\"\n");
    let e = load(&text).unwrap_err().to_string();
    assert!(e.contains("invalid code \"BUSY\""), "{e}");
}

#[test]
fn connect_tcp_beside_hosts_warns_unless_the_tool_binds_the_port_itself() {
    let w = warnings(&tool(
        r#"["/bin/true"]"#,
        r#"network = { hosts = ["api.github.com:443"], connect_tcp = [443, 8080], bind_tcp = [8080] }"#,
        &[],
    ));
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("connect_tcp = [443] beside hosts"), "{}", w[0]);
    assert!(w[0].contains("[connect-inside-netns:"), "{}", w[0]);
    let quiet = warnings(&tool(
        r#"["/bin/true"]"#,
        r#"network = { hosts = ["api.github.com:443"], connect_tcp = [8080], bind_tcp = [8080] }"#,
        &[],
    ));
    assert!(quiet.is_empty(), "{quiet:?}");
}

const CACHED: &str = "annotations = { read_only = true, idempotent = true }\ncache = { ttl = \"10m\" }";
const PATH: &str = "type = \"path\"\nrequired = true";

#[test]
fn cache_on_a_tool_that_reads_what_no_path_argument_names() {
    // A tree granted for reading: any file in it can change without the cache seeing it.
    let w = warnings(&tool(
        r#"["/bin/cat", "--", "{{file}}"]"#,
        &format!("{CACHED}\nread = [\"/srv\"]"),
        &[("file", PATH)],
    ));
    assert_lint(&w, "cache-inputs", "read /srv");
    assert_lint(&w, "cache-inputs", "pass every file the tool reads as a `type = \"path\"` param");
    // At the `cache` key.
    assert!(w[0].starts_with("t.toml:7:"), "{w:?}");
    // A working directory's contents, and literal paths in argv (an option's value too).
    let w = warnings(&tool(r#"["/bin/cat", "/etc/motd"]"#, CACHED, &[]));
    assert_lint(&w, "cache-inputs", "the literal path \"/etc/motd\" in command");
    let w = warnings(&tool(r#"["/bin/tool", "--config=/etc/tool.conf"]"#, CACHED, &[]));
    assert_lint(&w, "cache-inputs", "the literal path \"/etc/tool.conf\"");
    let w = warnings(&tool(r#"["/bin/ls"]"#, &format!("{CACHED}\nworking_dir = \"/srv\""), &[]));
    assert_lint(&w, "cache-inputs", "the contents of working_dir /srv");
    // Accepted after review; a tool whose only inputs are its arguments; no cache at all.
    assert_clean(&warnings(&tool(
        r#"["/bin/cat", "/etc/motd"]"#,
        &format!("{CACHED}\naccept_warnings = [\"cache-inputs\"]"),
        &[],
    )));
    assert_clean(&warnings(&tool(r#"["/bin/echo", "{{x}}"]"#, CACHED, &[("x", SAFE_STR)])));
    assert_clean(&warnings(&tool(r#"["/bin/cat", "--", "{{file}}"]"#, "read = [\"/srv\"]", &[("file", PATH)])));
}
