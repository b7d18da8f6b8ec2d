//! `[servers.NAME]` loaded (issue 31): the launcher is a tool read by the tool parser (defaults
//! merged, grants, limits), the server's own keys with their defaults, the exposure and the
//! argument rules; reloads take over an unchanged file's servers; a server named like another
//! file's server or namespace fails the load.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cordon_core::policy::{
    ArgCheck, Availability, Expose, Host, McpServer, PolicySet, fleet, load_sources, load_sources_after,
};
use serde_json::json;

fn host() -> Host {
    Host::new(false, 6)
}

const GIT: &str = r#"version = 1

[defaults]
timeout = "45s"
read = ["/usr/share"]
limits = { memory = "512MiB" }
env = { LANG = "C.UTF-8" }

[servers.git]
description = "git history"
command = ["/usr/bin/env", "--", "python3", "-m", "mcp_server_git"]
read = ["/etc"]
tools = ["git_log", "git_status"]
idle = "2m"
pin = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
client_requests = { roots = ["/srv/repos/"] }
prompts = []

[servers.git.rules.git_log]
repo_path = { under = ["/srv/./repos/"], pattern = "/srv/repos/[a-z]+", max_length = 64, required = true }
max_count = { min = 1, max = 50.5 }
format = { one_of = ["oneline", 1, true] }
author = { absent = true }

[tools.echo]
description = "a tool beside the server"
reason = "tests"
command = ["echo"]
"#;

fn load(files: &[(&str, &str)]) -> Result<PolicySet, cordon_core::policy::LoadError> {
    let sources: Vec<(PathBuf, String)> = files.iter().map(|(n, t)| (PathBuf::from(n), t.to_string())).collect();
    load_sources(&sources, &host())
}

fn server<'a>(set: &'a PolicySet, name: &str) -> &'a Arc<McpServer> {
    set.servers.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no server {name}"))
}

#[test]
fn a_server_is_a_launcher_tool_and_its_own_keys() {
    let set = load(&[("git.toml", GIT)]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(set.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["echo"], "never listed as a tool");
    let s = server(&set, "git");
    assert_eq!(s.description, "git history");
    let l = &s.launcher;
    assert_eq!(l.name, "git");
    assert_eq!(l.command_template(), ["/usr/bin/env", "--", "python3", "-m", "mcp_server_git"]);
    // [defaults] apply, path lists add up, exactly as for a tool.
    assert_eq!(l.timeout, Duration::from_secs(45));
    assert_eq!(l.sandbox.read, [PathBuf::from("/usr/share"), PathBuf::from("/etc")]);
    assert_eq!(l.sandbox.limits.memory, Some(512 << 20));
    assert_eq!(l.env.get("LANG").map(String::as_str), Some("C.UTF-8"));
    assert!(l.params.is_empty());
    assert!(!matches!(l.availability, Availability::Unavailable { ref reason } if reason == "not probed yet"));
    assert_eq!(s.expose, Expose::Only(["git_log".to_string(), "git_status".to_string()].into()));
    assert!(s.exposes("git_log") && !s.exposes("git_commit"));
    assert_eq!(s.exposed_name("git_log"), "git__git_log");
    assert!(!s.share);
    assert_eq!(s.idle, Duration::from_secs(120));
    assert_eq!(s.start_timeout, Duration::from_secs(30), "the default");
    assert_eq!(s.pin.as_deref(), Some("sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"));
    assert_eq!(s.client_requests.roots, [PathBuf::from("/srv/repos")]);
    assert_eq!(s.resources, Expose::Nothing, "none unless listed");
    assert_eq!(s.prompts, Expose::Nothing, "none passed on in this version");
    let rules = &s.rules["git_log"];
    let of = |arg: &str| rules.iter().filter(|r| r.argument == arg).map(|r| &r.check).collect::<Vec<_>>();
    match of("repo_path").as_slice() {
        [ArgCheck::Under(u), ArgCheck::Pattern(p), ArgCheck::MaxLength(64), ArgCheck::Required] => {
            assert_eq!(u, &[PathBuf::from("/srv/repos")], "normalised");
            assert!(p.is_match("/srv/repos/app") && !p.is_match("/srv/repos/app/../x"));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(of("max_count").as_slice(), [ArgCheck::Range { min: Some(1.0), max: Some(50.5) }]));
    assert!(
        matches!(of("format").as_slice(), [ArgCheck::OneOf(v)] if *v == vec![json!("oneline"), json!(1), json!(true)])
    );
    assert!(matches!(of("author").as_slice(), [ArgCheck::Absent]));

    let d = fleet::describe_server(s);
    assert_eq!(d["tools"], json!(["git_log", "git_status"]));
    assert_eq!(d["rules"]["git_log"]["repo_path"]["under"], json!(["/srv/repos"]));
    assert_eq!(d["rules"]["git_log"]["max_count"], json!({ "min": 1.0, "max": 50.5 }));
    assert_eq!(d["idle"], json!("2m"));
    assert_eq!(d["timeout"], json!("45s"));
    assert!(d.get("params").is_none() && d.get("confirm").is_none(), "no tool-only keys: {d}");
}

#[test]
fn tool_only_defaults_do_not_reach_a_server() {
    let text = "version = 1\n[defaults]\nconfirm = \"human\"\nargs_env_prefix = \"ARG_\"\narg_separator = true\n\
                [servers.s]\ndescription = \"d\"\ncommand = [\"/usr/bin/true\"]\ntools = [\"t\"]\n";
    let set = load(&[("s.toml", text)]).unwrap_or_else(|e| panic!("{e}"));
    let l = &server(&set, "s").launcher;
    assert_eq!(l.confirm, cordon_core::policy::Confirm::None);
    assert_eq!(l.args_env_prefix, None);
    assert!(!l.arg_separator);
}

#[test]
fn a_reload_takes_over_an_unchanged_files_servers() {
    let sources = vec![(PathBuf::from("git.toml"), GIT.to_string())];
    let one = load_sources(&sources, &host()).unwrap();
    let two = load_sources_after(&sources, &host(), Some(&one.reuse)).unwrap();
    assert!(Arc::ptr_eq(server(&one, "git"), server(&two, "git")));
    let changed = vec![(PathBuf::from("git.toml"), GIT.replace("idle = \"2m\"", "idle = \"3m\""))];
    let three = load_sources_after(&changed, &host(), Some(&two.reuse)).unwrap();
    assert!(!Arc::ptr_eq(server(&two, "git"), server(&three, "git")));
    assert_eq!(server(&three, "git").idle, Duration::from_secs(180));
}

#[test]
fn server_names_are_unique_across_files_and_no_namespace() {
    let other = "version = 1\n[servers.git]\ndescription = \"d\"\ncommand = [\"/usr/bin/true\"]\ntools = [\"t\"]\n";
    let e = load(&[("a.toml", GIT), ("b.toml", other)]).unwrap_err();
    let lines: Vec<String> = e.diagnostics.iter().filter(|d| d.is_error()).map(ToString::to_string).collect();
    assert_eq!(
        lines,
        [
            "a.toml:9:10: server \"git\" is defined again at b.toml:2; rename one of them",
            "b.toml:2:10: duplicate server name \"git\": already defined at a.toml:9",
        ]
    );
    let ns =
        "version = 1\nnamespace = \"git\"\n[tools.log]\ndescription = \"d\"\nreason = \"r\"\ncommand = [\"true\"]\n";
    let e = load(&[("a.toml", GIT), ("b.toml", ns)]).unwrap_err();
    let lines: Vec<String> = e.diagnostics.iter().filter(|d| d.is_error()).map(ToString::to_string).collect();
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(lines[0].starts_with("a.toml:9:10: server \"git\" has the name of the namespace of b.toml:2"));
    assert!(lines[1].starts_with("b.toml:2:13: namespace \"git\" is also the name of the server at a.toml:9"));
    // Unrelated names load.
    let set = load(&[("a.toml", GIT), ("b.toml", &ns.replace("\"git\"", "\"proj\""))]).unwrap();
    assert_eq!(set.servers.len(), 1);
}
