//! MCP servers in policies through the real binary (issue 31, policy side): `cordon policy check`
//! prints each `[servers.NAME]` beside the tools (command, exposure, available or why not), in
//! text and JSON; a server's launcher is probed exactly like a tool with the same sandbox keys; a
//! command that downloads the server at start is refused with how to install it; a server named
//! like another file's namespace is refused in both files; and the server lints fail
//! `--deny-warnings`.

use std::path::Path;

use cordon_tests::cordon_at;
use serde_json::json;

const NO_SOCKET: &str = "/nonexistent/cordon.sock";
const ATTACK: &str = env!("CARGO_BIN_EXE_cordon-attack");

fn offline(args: &[&str]) -> cordon_tests::Output {
    cordon_at(Path::new(NO_SOCKET), args)
}

fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// A server and a tool with the same program and sandbox keys, and a server whose program is
/// missing.
fn policy() -> String {
    let dir = Path::new(ATTACK).parent().unwrap().to_str().unwrap();
    format!(
        r#"version = 1

[servers.attack]
description = "a server with the attack binary as its program"
command = [{attack}, "serve"]
exec = [{dir}]
read = ["/etc/hostname"]
tools = ["probe", "echo"]
timeout = "20s"

[servers.attack.rules.probe]
path = {{ under = ["/srv/data"], max_length = 200 }}

[servers.gone]
description = "a server whose program is not installed"
command = ["/opt/cordon-test-missing/bin/mcp-server-gone"]
tools = ["x"]

[tools.twin]
description = "the same program and grants as the attack server"
reason = "compares the probes"
command = [{attack}, "serve"]
exec = [{dir}]
read = ["/etc/hostname"]
"#,
        attack = q(ATTACK),
        dir = q(dir),
    )
}

#[test]
fn policy_check_lists_each_server_with_its_exposure_and_availability() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("servers.toml");
    std::fs::write(&file, policy()).unwrap();
    let path = file.to_str().unwrap();

    let out = offline(&["policy", "check", path]);
    out.assert_code(0);
    assert!(out.stdout.contains("ok: 1 tool(s) and 2 server(s) in 1 file(s)"), "{out:#?}");
    assert!(out.stdout.contains(&format!("server attack: {ATTACK} serve\n")), "{out:#?}");
    assert!(out.stdout.contains("  lists tools echo, probe as attack__TOOL; rules on probe\n"), "{out:#?}");
    assert!(out.stdout.contains("server gone: /opt/cordon-test-missing/bin/mcp-server-gone\n"), "{out:#?}");
    assert!(
        out.stdout.contains("  unavailable on this host: /opt/cordon-test-missing/bin/mcp-server-gone: does not exist"),
        "{out:#?}"
    );

    let out = offline(&["policy", "check", "--json", path]);
    out.assert_code(0);
    let j = out.json();
    let servers = j["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 2, "{j}");
    let (attack, gone) = (&servers[0], &servers[1]);
    assert_eq!(attack["name"], json!("attack"), "{j}");
    assert_eq!(attack["command"], json!([ATTACK, "serve"]), "{j}");
    assert_eq!(attack["exposure"], json!({ "tools": ["echo", "probe"] }), "{j}");
    assert_eq!(attack["rules"], json!(["probe"]), "{j}");
    assert_eq!(attack["share"], json!(false), "{j}");
    assert_eq!((gone["available"].clone(), gone["name"].clone()), (json!(false), json!("gone")), "{j}");
    assert!(gone["reason"].as_str().unwrap().contains("does not exist"), "{j}");
    // The launcher is probed as a tool: the same keys give the same availability, whatever
    // this host decides it is.
    let twin_unavailable = j["unavailable"].as_array().unwrap().iter().find(|u| u["tool"] == json!("twin")).cloned();
    assert_eq!(attack["available"], json!(twin_unavailable.is_none()), "{j}");
    assert_eq!(attack["reason"], twin_unavailable.map_or(json!(null), |u| u["reason"].clone()), "{j}");
}

#[test]
fn a_command_that_downloads_at_start_is_refused_with_how_to_install_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("npx.toml");
    let text = r#"version = 1

[servers.fs]
description = "fetched from npm at every start"
command = ["npx", "-y", "@modelcontextprotocol/server-filesystem@2026.8.31", "/srv/data"]
tools = ["read_text_file"]

[servers.git]
description = "fetched from PyPI at every start"
command = ["/bin/sh", "-c", "exec uvx mcp-server-git --repository /srv/repo"]
tools = ["git_status"]
"#;
    std::fs::write(&file, text).unwrap();
    let out = offline(&["policy", "check", file.to_str().unwrap()]);
    out.assert_code(65);
    assert!(
        out.stderr.contains(
            "npx.toml:5:11: [servers.fs] command downloads @modelcontextprotocol/server-filesystem@2026.8.31 with \
             npx each time it starts"
        ),
        "{out:#?}"
    );
    assert!(
        out.stderr.contains(
            "`npm install --prefix /opt/cordon/mcp/fs @modelcontextprotocol/server-filesystem@2026.8.31`, then write \
             command = [\"/opt/cordon/mcp/fs/node_modules/.bin/BIN\", \"/srv/data\"]"
        ),
        "{out:#?}"
    );
    assert!(
        out.stderr.contains(
            "`python3 -m venv /opt/cordon/mcp/git && /opt/cordon/mcp/git/bin/pip install 'mcp-server-git==VERSION'`, \
             then write command = [\"/opt/cordon/mcp/git/bin/mcp-server-git\", \"--repository\", \"/srv/repo\"]"
        ),
        "{out:#?}"
    );
    assert!(out.stdout.contains("policy rejected: 2 error(s)"), "{out:#?}");
}

#[test]
fn a_server_named_like_another_files_namespace_is_refused_in_both_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("a-servers.toml"),
        "version = 1\n\n[servers.git]\ndescription = \"git\"\ncommand = [\"/usr/bin/true\"]\ntools = [\"git_log\"]\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("b-tools.toml"),
        "version = 1\nnamespace = \"git\"\n\n[tools.log]\ndescription = \"log\"\nreason = \"r\"\ncommand = [\"true\"]\n",
    )
    .unwrap();
    let out = offline(&["policy", "check", dir.path().to_str().unwrap()]);
    out.assert_code(65);
    assert!(out.stderr.contains("a-servers.toml:3:10: server \"git\" has the name of the namespace of "), "{out:#?}");
    assert!(out.stderr.contains("b-tools.toml:2:13: namespace \"git\" is also the name of the server at "), "{out:#?}");
}

#[test]
fn server_lints_fail_deny_warnings_until_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("whole.toml");
    let text = r#"version = 1

[servers.everything]
description = "every tool, shared, writing"
command = ["/usr/bin/true"]
tools = "*"
share = true
write = ["/var/tmp"]
"#;
    std::fs::write(&file, text).unwrap();
    let path = file.to_str().unwrap();
    let out = offline(&["policy", "check", "--deny-warnings", path]);
    out.assert_code(65);
    assert!(out.stderr.contains("whole.toml:6:9: warning: server \"everything\" lists every tool it has"), "{out:#?}");
    assert!(out.stderr.contains("[server-exposed-whole: "), "{out:#?}");
    assert!(out.stderr.contains("whole.toml:7:9: warning: server \"everything\" is shared"), "{out:#?}");
    assert!(out.stderr.contains("[server-shared-writes: "), "{out:#?}");

    let accepted = text.replace(
        "share = true\n",
        "share = true\naccept_warnings = [\"server-exposed-whole\", \"server-shared-writes\"]\n",
    );
    std::fs::write(&file, accepted).unwrap();
    let out = offline(&["policy", "check", "--json", "--deny-warnings", path]);
    let j = out.json();
    let lints: Vec<&str> = j["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["message"].as_str())
        .filter(|m| m.contains("[server-"))
        .collect();
    assert!(lints.is_empty(), "{j}");
}

#[test]
fn policy_diff_names_a_changed_server_key_by_key() {
    let server = |idle: &str, tools: &str| {
        format!(
            "version = 1\n\n[servers.git]\ndescription = \"git\"\ncommand = [\"/usr/bin/true\"]\ntools = {tools}\n\
             idle = \"{idle}\"\n"
        )
    };
    let (old, new) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::write(old.path().join("git.toml"), server("2m", "[\"git_log\"]")).unwrap();
    std::fs::write(new.path().join("git.toml"), server("3m", "[\"git_log\", \"git_show\"]")).unwrap();
    let (o, n) = (old.path().to_str().unwrap(), new.path().to_str().unwrap());
    let out = offline(&["policy", "diff", "--json", o, n]);
    out.assert_code(1);
    assert_eq!(
        out.json()["servers"],
        json!({ "added": [], "removed": [], "changed": [{ "name": "git", "keys": [
            { "key": "idle", "old": "2m", "new": "3m" },
            { "key": "tools", "old": ["git_log"], "new": ["git_log", "git_show"] },
        ]}]}),
    );
    let out = offline(&["policy", "diff", o, n]);
    out.assert_code(1);
    assert!(out.stdout.contains("\nchanged server: git\n  idle: \"2m\" -> \"3m\"\n"), "{out:#?}");
}

#[test]
fn a_daemon_loads_servers_and_get_policy_agrees_with_the_offline_load() {
    let text = "version = 1\n\n[servers.git]\ndescription = \"git\"\ncommand = [\"/usr/bin/true\"]\n\
                tools = [\"git_log\"]\n\n[servers.git.rules.git_log]\nmax_count = { max = 10 }\n";
    let d = cordon_tests::Daemon::start(&[("git.toml", text)]);
    // Against its own directory: identical, servers included.
    let out = d.cordon(&["policy", "diff", "--json", d.policies.to_str().unwrap()]);
    out.assert_code(0);
    assert_eq!(out.json()["servers"], json!({ "added": [], "removed": [], "changed": [] }));
    // Against a directory with the rule changed: the server's rule, key by key.
    let changed = tempfile::tempdir().unwrap();
    std::fs::write(changed.path().join("git.toml"), text.replace("max = 10", "max = 20")).unwrap();
    let out = d.cordon(&["policy", "diff", "--json", changed.path().to_str().unwrap()]);
    out.assert_code(1);
    assert_eq!(
        out.json()["servers"]["changed"],
        json!([{ "name": "git", "keys": [{ "key": "rules.git_log.max_count.max", "old": 10.0, "new": 20.0 }] }]),
    );
}
