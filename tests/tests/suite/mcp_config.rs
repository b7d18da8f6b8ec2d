//! `cordon mcp config HOST`: the snippets every agent host gets (stdio and HTTP), `--write` merging
//! into a host's config file without losing anything (order, other servers, top-level keys,
//! Codex's comments, mode, owner, a backup, symlinks), `--remove`, and the refusals (a file that
//! does not parse, Claude Desktop's `--write`, Codex's inline token, bad names and hosts).
//! Claude Code and Codex themselves (npm, pinned, installed by tests/run into
//! /opt/cordon-agent-hosts) read what cordon wrote and list the server, in a network namespace of
//! their own with only loopback up.

use std::fs;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cordon_tests::{Daemon, Output, Skip, bin, fixture, is_root};
use serde_json::{Value, json};

/// Where tests/run installs the agent hosts (npm, pinned versions).
const HOSTS_PREFIX: &str = "/opt/cordon-agent-hosts";
/// The versions tests/run pins (and this test checks it got).
const CLAUDE_CODE_VERSION: &str = "2.1.332";
const CODEX_VERSION: &str = "0.171.0";

/// A missing prerequisite: skip with its reason and a message, or fail under CI (the harness's `skip!`).
fn skip_or_fail(reason: Skip, why: &str) {
    cordon_tests::skip!(reason, "{why}");
}

/// A temporary home and a project directory in it.
struct Place {
    _dir: tempfile::TempDir,
    home: PathBuf,
    project: PathBuf,
}

impl Place {
    fn new() -> Place {
        let dir = tempfile::Builder::new().prefix("cordon-wiring-").tempdir().unwrap();
        let home = dir.path().join("home");
        let project = home.join("project");
        fs::create_dir_all(&project).unwrap();
        Place { _dir: dir, home, project }
    }

    /// `cordon ARGS` in the project directory with HOME here and no host variables from outside.
    fn cordon(&self, args: &[&str]) -> Output {
        self.cordon_stdin(args, "")
    }

    fn cordon_stdin(&self, args: &[&str], stdin: &str) -> Output {
        use std::io::Write as _;
        let mut child = Command::new(bin("cordon"))
            .args(args)
            .current_dir(&self.project)
            .env("HOME", &self.home)
            .env_remove("CODEX_HOME")
            .env_remove("CLAUDE_CONFIG_DIR")
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("CORDON_SOCKET")
            .env_remove("CORDON_REMOTE")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        Output::from(child.wait_with_output().unwrap())
    }
}

/// The running cordon's canonical path, as the entries must name it.
fn exe() -> String {
    fs::canonicalize(bin("cordon")).unwrap().to_str().unwrap().to_string()
}

fn json_file(path: &Path) -> Value {
    serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap()
}

fn toml_file(path: &Path) -> toml::Table {
    toml::from_str(&fs::read_to_string(path).unwrap()).unwrap()
}

const URL: &str = "http://127.0.0.1:8765/mcp";

/// Every host's documented shape, printed, for stdio and HTTP.
#[test]
fn printed_snippets_have_each_hosts_documented_shape() {
    let p = Place::new();
    let exe = exe();
    let stdio = |typed: bool| {
        let mut e = json!({"command": exe, "args": ["mcp"], "env": {}});
        if typed {
            e["type"] = json!("stdio");
        }
        e
    };
    let cases: [(&str, &str, Value); 4] = [
        ("claude-code", "mcpServers", stdio(true)),
        ("cursor", "mcpServers", stdio(false)),
        ("vscode", "servers", stdio(true)),
        ("windsurf", "mcpServers", stdio(false)),
    ];
    for (host, key, entry) in cases {
        let out = p.cordon(&["mcp", "config", host]);
        out.assert_code(0);
        assert_eq!(out.json(), json!({ key: { "cordon": entry } }), "{host}");
    }
    let http: [(&str, Value); 4] = [
        (
            "claude-code",
            json!({"mcpServers": {"cordon": {"type": "http", "url": URL,
                "headers": {"Authorization": "Bearer ${CORDON_MCP_TOKEN}"}}}}),
        ),
        (
            "cursor",
            json!({"mcpServers": {"cordon": {"url": URL,
                "headers": {"Authorization": "Bearer ${env:CORDON_MCP_TOKEN}"}}}}),
        ),
        (
            "vscode",
            json!({
                "inputs": [{"type": "promptString", "id": "cordon-token",
                    "description": "cordon bearer token for cordon (`cordon token issue`)", "password": true}],
                "servers": {"cordon": {"type": "http", "url": URL,
                    "headers": {"Authorization": "Bearer ${input:cordon-token}"}}}
            }),
        ),
        (
            "windsurf",
            json!({"mcpServers": {"cordon": {"serverUrl": URL,
                "headers": {"Authorization": "Bearer ${env:CORDON_MCP_TOKEN}"}}}}),
        ),
    ];
    for (host, want) in http {
        let out = p.cordon(&["mcp", "config", host, "--http", URL]);
        out.assert_code(0);
        assert_eq!(out.json(), want, "{host} --http");
    }
    // Another variable, and the order the hosts' documentation shows (type first).
    let out = p.cordon(&["mcp", "config", "claude-code", "--http", URL, "--token-env", "MY_TOKEN"]);
    assert_eq!(out.json()["mcpServers"]["cordon"]["headers"]["Authorization"], "Bearer ${MY_TOKEN}");
    assert!(out.stdout.find("\"type\"").unwrap() < out.stdout.find("\"url\"").unwrap(), "{}", out.stdout);

    // Codex: TOML.
    let out = p.cordon(&["mcp", "config", "codex"]);
    out.assert_code(0);
    let t: toml::Table = toml::from_str(&out.stdout).unwrap();
    let want: toml::Table =
        toml::from_str(&format!("[mcp_servers.cordon]\ncommand = {exe:?}\nargs = [\"mcp\"]\nenv = {{}}\n")).unwrap();
    assert_eq!(t, want);
    let out = p.cordon(&["mcp", "config", "codex", "--http", URL]);
    out.assert_code(0);
    let t: toml::Table = toml::from_str(&out.stdout).unwrap();
    let want: toml::Table =
        toml::from_str(&format!("[mcp_servers.cordon]\nurl = {URL:?}\nbearer_token_env_var = \"CORDON_MCP_TOKEN\"\n"))
            .unwrap();
    assert_eq!(t, want);

    // The daemon this command was pointed at, made absolute, and arguments after `--`.
    let out = p.cordon(&["--socket", "run/cordon.sock", "mcp", "config", "cursor", "--", "--page-size", "5"]);
    out.assert_code(0);
    let sock = p.project.join("run/cordon.sock");
    assert_eq!(out.json()["mcpServers"]["cordon"]["args"], json!(["mcp", "--socket", sock, "--page-size", "5"]));
    let out = p.cordon(&["mcp", "config", "cursor", "--name", "cordon-ci"]);
    assert!(out.json()["mcpServers"]["cordon-ci"].is_object());

    // Claude Desktop: a remote snippet over ssh; a path with a space quoted for the remote shell.
    let out = p.cordon(&["mcp", "config", "claude-desktop", "--ssh", "alice@build-box"]);
    out.assert_code(0);
    assert_eq!(
        out.json(),
        json!({"mcpServers": {"cordon": {"command": "ssh", "args": ["alice@build-box", exe, "mcp"], "env": {}}}})
    );
    let out = p.cordon(&["--socket", "/run/a b/s.sock", "mcp", "config", "claude-desktop", "--ssh", "box"]);
    assert_eq!(out.json()["mcpServers"]["cordon"]["args"], json!(["box", exe, "mcp", "--socket", "'/run/a b/s.sock'"]));
}

/// `--remote` with its certificate files: carried into the entry, the paths made absolute, and
/// no `--socket` beside it.
#[test]
fn remote_flags_are_carried_with_absolute_paths() {
    let p = Place::new();
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"])
        .args(["-keyout", "k.pem", "-out", "c.pem", "-subj", "/CN=wiring", "-days", "2"])
        .current_dir(&p.project)
        .output();
    if !made.is_ok_and(|o| o.status.success()) {
        return skip_or_fail(Skip::MissingTool("openssl"), "openssl cannot make a test certificate");
    }
    fs::set_permissions(p.project.join("k.pem"), fs::Permissions::from_mode(0o600)).unwrap();
    let remote = "https://127.0.0.1:9443";
    let flags = ["--remote", remote, "--cert", "c.pem", "--key", "k.pem", "--ca", "c.pem"];
    let mut args = flags.to_vec();
    args.extend(["--socket", "/run/ignored.sock", "mcp", "config", "cursor"]);
    let out = p.cordon(&args);
    out.assert_code(0);
    let abs = |n: &str| p.project.join(n).to_str().unwrap().to_string();
    assert_eq!(
        out.json()["mcpServers"]["cordon"]["args"],
        json!(["mcp", "--remote", remote, "--cert", abs("c.pem"), "--key", abs("k.pem"), "--ca", abs("c.pem")])
    );
}

/// Refusals: each with its exit code, its reason, and nothing written.
#[test]
fn bad_requests_are_refused_and_write_nothing() {
    let p = Place::new();
    let refuse = |args: &[&str], code: i32, says: &str| {
        let out = p.cordon(args);
        out.assert_code(code);
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{args:?}: {}", out.stdout);
    };
    refuse(
        &["mcp", "config", "emacs"],
        2,
        "[possible values: claude-code, cursor, vscode, codex, windsurf, claude-desktop]",
    );
    refuse(&["mcp", "config", "claude-desktop", "--write", "--ssh", "box"], 2, "does not run on Linux");
    refuse(&["mcp", "config", "claude-desktop", "--remove"], 2, "does not run on Linux");
    refuse(&["mcp", "config", "claude-desktop"], 2, "--ssh USER@THIS-HOST");
    refuse(&["mcp", "config", "claude-desktop", "--http", URL], 2, "stdio");
    refuse(&["mcp", "config", "codex", "--write", "--http", URL, "--inline-token", "cordon_a_b"], 2, "Codex refuses");
    refuse(&["mcp", "config", "codex", "--scope", "project"], 2, "--file .codex/config.toml");
    refuse(&["mcp", "config", "windsurf", "--scope", "project"], 2, "one MCP config file");
    refuse(&["mcp", "config", "vscode", "--http", URL, "--token-env", "T"], 2, "VS Code asks for the token itself");
    refuse(&["mcp", "config", "cursor", "--name", "../x"], 2, "a server name is");
    refuse(&["mcp", "config", "cursor", "--name", ""], 2, "a server name is");
    // An ssh "host" that is an option would run a command of its choosing (-oProxyCommand).
    refuse(&["mcp", "config", "cursor", "--ssh=-oProxyCommand=sh"], 2, "not starting with `-`");
    refuse(&["mcp", "config", "cursor", "--http", "ftp://x/"], 2, "http://127.0.0.1:8765/mcp");
    refuse(&["mcp", "config", "cursor", "--http", "http://u:pw@127.0.0.1:1/"], 2, "credentials do not go in the URL");
    refuse(&["mcp", "config", "cursor", "--http", URL, "--token-env", "A-B"], 2, "environment variable");
    refuse(&["mcp", "config", "cursor", "--token-env", "T"], 2, "--http");
    refuse(&["mcp", "config", "cursor", "--http", URL, "--inline-token", "a b"], 2, "printable ASCII");
    refuse(&["mcp", "config", "cursor", "--write", "--remove"], 2, "cannot be used with");
    refuse(&["mcp", "--page-size", "5", "config", "cursor"], 2, "cannot be used with");
    let mut left: Vec<_> = fs::read_dir(&p.project).unwrap().map(|e| e.unwrap().file_name()).collect();
    left.extend(fs::read_dir(&p.home).unwrap().map(|e| e.unwrap().file_name()));
    assert_eq!(left, vec![std::ffi::OsString::from("project")], "something was written");
}

/// `--write` into each JSON host's file that holds other things: they stay, in their order; the
/// previous file is the backup; the mode stays; `--remove` gives back what was there.
#[test]
fn write_merges_into_json_files_and_remove_restores_them() {
    let p = Place::new();
    let cases: [(&[&str], PathBuf, &str); 6] = [
        (&["claude-code"], p.project.join(".mcp.json"), "mcpServers"),
        (&["claude-code", "--scope", "user"], p.home.join(".claude.json"), "mcpServers"),
        (&["cursor"], p.project.join(".cursor/mcp.json"), "mcpServers"),
        (&["cursor", "--scope", "user"], p.home.join(".cursor/mcp.json"), "mcpServers"),
        (&["vscode"], p.project.join(".vscode/mcp.json"), "servers"),
        (&["windsurf"], p.home.join(".codeium/windsurf/mcp_config.json"), "mcpServers"),
    ];
    for (host, path, key) in cases {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let original = format!(
            "{{\n  \"zeta\": 1,\n  \"{key}\": {{\n    \"other\": {{\"command\": \"/bin/other\", \"args\": [\"x\"]}}\n  }},\n  \
             \"alpha\": {{\"nested\": [1, 2.5, \"three\"], \"b\": null}},\n  \"big\": 18446744073709551615\n}}\n"
        );
        fs::write(&path, &original).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        let mut args = vec!["mcp", "config"];
        args.extend_from_slice(host);
        args.push("--write");
        let out = p.cordon(&args);
        out.assert_code(0);
        assert!(out.stdout.contains("added MCP server \"cordon\""), "{host:?}: {}", out.stdout);
        assert!(out.stdout.contains("next: "), "{}", out.stdout);
        let text = fs::read_to_string(&path).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["zeta"], 1);
        assert_eq!(v["alpha"], json!({"nested": [1, 2.5, "three"], "b": null}));
        assert_eq!(v[key]["other"], json!({"command": "/bin/other", "args": ["x"]}));
        assert_eq!(v[key]["cordon"]["command"], exe());
        assert!(text.contains("18446744073709551615"), "{text}");
        // Key order as it was, the new server after the old one.
        let at = |s: &str| text.find(s).unwrap_or_else(|| panic!("{s} missing: {text}"));
        assert!(at("\"zeta\"") < at(&format!("\"{key}\"")) && at(&format!("\"{key}\"")) < at("\"alpha\""), "{text}");
        assert!(at("\"other\"") < at("\"cordon\""), "{text}");
        assert!(at("\"nested\"") < at("\"b\""), "{text}");
        let bak = PathBuf::from(format!("{}.bak", path.display()));
        assert_eq!(fs::read_to_string(&bak).unwrap(), original, "backup of {}", path.display());
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o7777, 0o640);

        // Again: nothing to do, nothing written.
        let before = fs::metadata(&path).unwrap().ino();
        let out = p.cordon(&args);
        out.assert_code(0);
        assert!(out.stdout.contains("already has this MCP server"), "{}", out.stdout);
        assert_eq!(fs::metadata(&path).unwrap().ino(), before);

        args.pop();
        args.push("--remove");
        let out = p.cordon(&args);
        out.assert_code(0);
        assert!(out.stdout.contains("removed MCP server \"cordon\""), "{}", out.stdout);
        let after: Value = json_file(&path);
        let was: Value = serde_json::from_str(&original).unwrap();
        assert_eq!(after, was, "{host:?}: remove gives back the rest");
        // None left: says so, exit 66 (not found), nothing changed.
        let text = fs::read_to_string(&path).unwrap();
        let out = p.cordon(&args);
        out.assert_code(66);
        assert!(out.stderr.contains("has no MCP server \"cordon\""), "{}", out.stderr);
        assert_eq!(fs::read_to_string(&path).unwrap(), text);
    }
}

/// A new file (and its directories) is created; an entry that differs is replaced in its place
/// and the output says so; VS Code's token input is added once and removed with its server.
#[test]
fn write_creates_replaces_and_keeps_vscode_inputs() {
    let p = Place::new();
    let out = p.cordon(&["mcp", "config", "cursor", "--write"]);
    out.assert_code(0);
    let path = p.project.join(".cursor/mcp.json");
    assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o644, "a project file is shared");
    assert!(!PathBuf::from(format!("{}.bak", path.display())).exists(), "no backup of nothing");
    let out = p.cordon(&["--socket", "/run/other.sock", "mcp", "config", "cursor", "--write"]);
    out.assert_code(0);
    assert!(out.stdout.contains("replaced the MCP server \"cordon\""), "{}", out.stdout);
    assert_eq!(json_file(&path)["mcpServers"]["cordon"]["args"], json!(["mcp", "--socket", "/run/other.sock"]));

    let vs = p.project.join(".vscode/mcp.json");
    fs::create_dir_all(vs.parent().unwrap()).unwrap();
    fs::write(
        &vs,
        r#"{"inputs": [{"type": "promptString", "id": "gh", "description": "GitHub", "password": true}],
            "servers": {"gh": {"type": "http", "url": "https://example.invalid/", "headers": {"A": "${input:gh}"}}}}"#,
    )
    .unwrap();
    for _ in 0..2 {
        p.cordon(&["mcp", "config", "vscode", "--write", "--http", URL]).assert_code(0);
    }
    let v = json_file(&vs);
    let ids: Vec<_> = v["inputs"].as_array().unwrap().iter().map(|i| i["id"].clone()).collect();
    assert_eq!(ids, vec![json!("gh"), json!("cordon-token")]);
    assert_eq!(v["servers"]["cordon"]["headers"]["Authorization"], "Bearer ${input:cordon-token}");
    p.cordon(&["mcp", "config", "vscode", "--remove"]).assert_code(0);
    let v = json_file(&vs);
    assert_eq!(v["inputs"], json!([{"type": "promptString", "id": "gh", "description": "GitHub", "password": true}]));
    assert!(v["servers"].get("cordon").is_none() && v["servers"]["gh"].is_object());

    // --json: what was done, where.
    let out = p.cordon(&["--json", "mcp", "config", "windsurf", "--write"]);
    out.assert_code(0);
    let j = out.json();
    assert_eq!(j["action"], "added");
    assert_eq!(j["file"], json!(p.home.join(".codeium/windsurf/mcp_config.json")));
    assert_eq!(fs::metadata(p.home.join(".codeium/windsurf/mcp_config.json")).unwrap().mode() & 0o777, 0o600);
}

/// An inline token only when asked, then the file is 0600 and the output says so; `-` reads it
/// from stdin so that it is not in the process list.
#[test]
fn inline_tokens_only_when_asked_and_the_file_becomes_private() {
    let p = Place::new();
    let path = p.home.join(".cursor/mcp.json");
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, "{}").unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    let out = p.cordon(&["mcp", "config", "cursor", "--scope", "user", "--write", "--http", URL]);
    out.assert_code(0);
    assert!(!fs::read_to_string(&path).unwrap().contains("cordon_"), "no token without --inline-token");
    assert!(out.stdout.contains("$CORDON_MCP_TOKEN"), "{}", out.stdout);
    let out = p.cordon_stdin(
        &["mcp", "config", "cursor", "--scope", "user", "--write", "--http", URL, "--inline-token", "-"],
        "cordon_0123456789abcdef_secret\n",
    );
    out.assert_code(0);
    assert!(out.stdout.contains("written inline") && out.stdout.contains("0600"), "{}", out.stdout);
    assert_eq!(
        json_file(&path)["mcpServers"]["cordon"]["headers"]["Authorization"],
        "Bearer cordon_0123456789abcdef_secret"
    );
    assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
    let out = p.cordon(&["mcp", "config", "claude-code", "--http", URL, "--inline-token", "tok_1"]);
    assert_eq!(out.json()["mcpServers"]["cordon"]["headers"]["Authorization"], "Bearer tok_1");
}

/// Every line of `original` is in `text`, in the same order.
#[track_caller]
fn keeps_lines(original: &str, text: &str) {
    let mut lines = text.lines();
    for want in original.lines() {
        assert!(lines.any(|l| l == want), "line {want:?} lost or moved:\n{text}");
    }
}

/// Codex's TOML: comments, other tables and their layout survive add, replace and remove.
#[test]
fn codex_toml_keeps_comments_and_other_servers() {
    let p = Place::new();
    let codex_home = p.home.join("codex-home");
    fs::create_dir_all(&codex_home).unwrap();
    let path = codex_home.join("config.toml");
    let original = "# my Codex settings\nmodel = \"o3\"  # the model\n\n[mcp_servers.docs]\n# docs server\n\
                    command = \"/bin/docs\"\nargs = [\"serve\"]\n\n[profiles.fast]\nmodel = \"o4-mini\"\n";
    fs::write(&path, original).unwrap();
    let with_codex_home = |args: &[&str]| {
        let out = Command::new(bin("cordon"))
            .args(args)
            .current_dir(&p.project)
            .env("HOME", &p.home)
            .env("CODEX_HOME", &codex_home)
            .env_remove("CORDON_SOCKET")
            .output()
            .unwrap();
        Output::from(out)
    };
    with_codex_home(&["mcp", "config", "codex", "--write"]).assert_code(0);
    let text = fs::read_to_string(&path).unwrap();
    keeps_lines(original, &text);
    // Beside the other server.
    assert!(text.find("[mcp_servers.cordon]").unwrap() < text.find("[profiles.fast]").unwrap(), "{text}");
    let t = toml_file(&path);
    assert_eq!(t["mcp_servers"]["cordon"]["command"].as_str(), Some(exe().as_str()));
    assert_eq!(fs::read_to_string(codex_home.join("config.toml.bak")).unwrap(), original);

    // Replaced in place, a comment above it kept.
    let text = text.replace("[mcp_servers.cordon]", "# cordon, by cordon\n[mcp_servers.cordon]");
    fs::write(&path, format!("{text}\n[tui]\nnotifications = true\n")).unwrap();
    let out = with_codex_home(&["mcp", "config", "codex", "--write", "--http", URL, "--token-env", "CT"]);
    out.assert_code(0);
    assert!(out.stdout.contains("replaced"), "{}", out.stdout);
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.contains("# cordon, by cordon\n[mcp_servers.cordon]\nurl = "), "{text}");
    assert!(text.find("[mcp_servers.cordon]").unwrap() < text.find("[tui]").unwrap(), "{text}");
    let t = toml_file(&path);
    assert_eq!(t["mcp_servers"]["cordon"].as_table().unwrap().len(), 2, "{text}");
    assert_eq!(t["mcp_servers"]["cordon"]["bearer_token_env_var"].as_str(), Some("CT"));
    assert!(!text.contains("bearer_token ="), "{text}");

    with_codex_home(&["mcp", "config", "codex", "--remove"]).assert_code(0);
    let text = fs::read_to_string(&path).unwrap();
    keeps_lines(original, &text);
    assert!(!text.contains("mcp_servers.cordon") && !text.contains("url =") && text.contains("[tui]"), "{text}");
}

/// A file that does not parse is refused with FILE:LINE:COL, exit 65, and left as it was (no
/// backup either); so is one whose servers key is not an object.
#[test]
fn unparsable_files_are_refused_unchanged() {
    let p = Place::new();
    let cases: [(&[&str], PathBuf, &str, &str); 4] = [
        (&["claude-code"], p.project.join(".mcp.json"), "{\n  \"mcpServers\": {,\n}\n", ":2:"),
        // VS Code files may hold comments (JSONC): refused, not stripped.
        (&["vscode"], p.project.join(".vscode/mcp.json"), "{\n  // mine\n  \"servers\": {}\n}\n", ":2:3"),
        (&["cursor"], p.project.join(".cursor/mcp.json"), "{\"mcpServers\": []}", "not an object"),
        (&["codex"], p.home.join(".codex/config.toml"), "model = \"o3\"\n[mcp_servers\n", ":2:"),
    ];
    for (host, path, content, says) in cases {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, content).unwrap();
        for flag in ["--write", "--remove"] {
            let mut args = vec!["mcp", "config"];
            args.extend_from_slice(host);
            args.push(flag);
            let out = p.cordon(&args);
            out.assert_code(65);
            let prefix = format!("{}:", path.display());
            assert!(out.stderr.contains(&prefix) && out.stderr.contains(says), "{host:?}: {}", out.stderr);
            assert!(out.stderr.contains("nothing changed"), "{}", out.stderr);
            assert_eq!(fs::read_to_string(&path).unwrap(), content);
            assert!(!PathBuf::from(format!("{}.bak", path.display())).exists());
        }
    }
}

/// A symlinked config (dotfiles) stays a symlink: its target is edited; the file's owner and mode
/// stay. As root, a path another user could redirect (their home, a symlink of theirs to a file of
/// root's) is refused (exit 77) and nothing is written: root would edit whatever they pointed at.
#[test]
fn symlinks_followed_owner_and_mode_kept_root_not_redirected() {
    let p = Place::new();
    let dotfiles = p.home.join("dotfiles");
    fs::create_dir_all(&dotfiles).unwrap();
    fs::write(dotfiles.join("claude.json"), "{\"theme\": \"dark\"}").unwrap();
    let link = p.home.join(".claude.json");
    std::os::unix::fs::symlink(dotfiles.join("claude.json"), &link).unwrap();
    p.cordon(&["mcp", "config", "claude-code", "--scope", "user", "--write"]).assert_code(0);
    assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    let v = json_file(&dotfiles.join("claude.json"));
    assert_eq!(v["theme"], "dark");
    assert!(v["mcpServers"]["cordon"].is_object());
    assert!(dotfiles.join("claude.json.bak").exists());

    let cursor = p.home.join(".cursor/mcp.json");
    p.cordon(&["mcp", "config", "cursor", "--scope", "user", "--write"]).assert_code(0);
    fs::set_permissions(&cursor, fs::Permissions::from_mode(0o604)).unwrap();
    p.cordon(&["--socket", "/run/x.sock", "mcp", "config", "cursor", "--scope", "user", "--write"]).assert_code(0);
    assert_eq!(fs::metadata(&cursor).unwrap().mode() & 0o7777, 0o604);
    assert_eq!(fs::metadata(p.home.join(".cursor/mcp.json.bak")).unwrap().mode() & 0o7777, 0o604);

    if !is_root() {
        return skip_or_fail(Skip::NotRoot, "the root half (a user's symlink and directory) takes root");
    }
    // A user's symlink in a root-owned place, pointing at a file of root's.
    let victim = p.home.join("root-owned.json");
    fs::write(&victim, "{\"keep\": true}").unwrap();
    let theirs = p.project.join(".mcp.json");
    std::os::unix::fs::symlink(&victim, &theirs).unwrap();
    std::os::unix::fs::lchown(&theirs, Some(54_321), Some(54_321)).unwrap();
    let out = p.cordon(&["mcp", "config", "claude-code", "--write"]);
    out.assert_code(77);
    assert!(out.stderr.contains("belongs to uid 54321") && out.stderr.contains("sudo -u"), "{}", out.stderr);
    assert_eq!(fs::read_to_string(&victim).unwrap(), "{\"keep\": true}");
    // A directory of theirs above the file, for --write and --remove alike.
    let their_home = p.home.join("alice");
    fs::create_dir_all(&their_home).unwrap();
    std::os::unix::fs::chown(&their_home, Some(54_321), Some(54_321)).unwrap();
    let file = their_home.join(".cursor/mcp.json");
    for flag in ["--write", "--remove"] {
        let out = p.cordon(&["mcp", "config", "cursor", "--file", file.to_str().unwrap(), flag]);
        out.assert_code(77);
        assert!(out.stderr.contains(&format!("{} belongs to uid 54321", their_home.display())), "{}", out.stderr);
    }
    assert!(!their_home.join(".cursor").exists());
}

/// As an unprivileged user (the developer the README means): files and directories created in
/// their home are theirs; a project directory they may not write is refused with exit 77 and the
/// system's reason, and nothing is left behind.
#[test]
fn as_an_unprivileged_user_files_are_theirs_and_denials_are_77() {
    if !is_root() {
        return skip_or_fail(Skip::NotRoot, "making the agent user takes root");
    }
    use cordon_tests::agent::{self, AGENT};
    agent::ensure();
    let (uid, gid) = (agent::id("-u", AGENT), agent::id("-g", AGENT));
    let p = Place::new();
    for d in [p.home.parent().unwrap(), &p.home] {
        std::os::unix::fs::chown(d, Some(uid), Some(gid)).unwrap();
    }
    // The project stays root's (0755): the agent may read it, not write it.
    let as_agent = |args: &[&str]| -> Output {
        agent::command()
            .args(args)
            .current_dir(&p.project)
            .env("HOME", &p.home)
            .env_remove("CODEX_HOME")
            .env_remove("CORDON_SOCKET")
            .stdin(Stdio::null())
            .output()
            .unwrap()
            .into()
    };
    let out = as_agent(&["mcp", "config", "codex", "--write"]);
    out.assert_code(0);
    for made in [p.home.join(".codex"), p.home.join(".codex/config.toml")] {
        let m = fs::metadata(&made).unwrap();
        assert_eq!((m.uid(), m.gid()), (uid, gid), "{}", made.display());
    }
    assert_eq!(fs::metadata(p.home.join(".codex/config.toml")).unwrap().mode() & 0o777, 0o600);
    // Their own daemon (in XDG_RUNTIME_DIR, which Codex does not pass to servers) is named.
    let runtime = p.home.join("run");
    fs::create_dir_all(runtime.join("cordon")).unwrap();
    fs::write(runtime.join("cordon/cordon.sock"), "").unwrap();
    for d in [&runtime, &runtime.join("cordon")] {
        std::os::unix::fs::chown(d, Some(uid), Some(gid)).unwrap();
        fs::set_permissions(d, fs::Permissions::from_mode(0o700)).unwrap();
    }
    let out: Output = agent::command()
        .args(["mcp", "config", "cursor"])
        .env("XDG_RUNTIME_DIR", &runtime)
        .env_remove("CORDON_SOCKET")
        .output()
        .unwrap()
        .into();
    out.assert_code(0);
    let own = runtime.join("cordon/cordon.sock");
    assert_eq!(out.json()["mcpServers"]["cordon"]["args"], json!(["mcp", "--socket", own]), "{out:?}");

    let out = as_agent(&["mcp", "config", "claude-code", "--write"]);
    out.assert_code(77);
    assert!(out.stderr.contains(".mcp.json") && out.stderr.contains("ermission denied"), "{}", out.stderr);
    assert_eq!(fs::read_dir(&p.project).unwrap().count(), 0, "nothing left in the project");
}

/// The agent hosts' binaries, at their pinned versions, or why not.
fn agent_hosts() -> Result<(PathBuf, PathBuf), String> {
    let bin_dir = Path::new(HOSTS_PREFIX).join("node_modules/.bin");
    let (claude, codex) = (bin_dir.join("claude"), bin_dir.join("codex"));
    if !claude.exists() || !codex.exists() {
        return Err(format!(
            "Claude Code and Codex are not installed in {HOSTS_PREFIX} (tests/run installs them: npm install --prefix \
             {HOSTS_PREFIX} @anthropic-ai/claude-code@{CLAUDE_CODE_VERSION} @openai/codex@{CODEX_VERSION})"
        ));
    }
    if !is_root() {
        return Err("the agent hosts run in a network namespace of their own, which takes root".into());
    }
    for (program, package) in [("unshare", "util-linux"), ("ip", "iproute2"), ("curl", "curl")] {
        if Command::new(program).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
            return Err(format!("{program} ({package}) is not installed"));
        }
    }
    Ok((claude, codex))
}

/// A host's CLI, offline: a new network namespace with only loopback up, telemetry off, HOME here.
fn host_cli(p: &Place, program: &Path, args: &[&str]) -> Output {
    host_cli_with(p, "exec \"$@\"", program, args, &[])
}

/// As [`host_cli`], the command run by `script` (`"$@"` is the command) with these variables.
fn host_cli_with(p: &Place, script: &str, program: &Path, args: &[&str], vars: &[(&str, &str)]) -> Output {
    let script = format!("ip link set lo up 2>/dev/null || true; {script}");
    let out = Command::new("unshare")
        .args(["--net", "--", "sh", "-c", &script, "sh"])
        .arg(program)
        .args(args)
        .current_dir(&p.project)
        .env("HOME", &p.home)
        .env("PATH", format!("{HOSTS_PREFIX}/node_modules/.bin:/usr/local/bin:/usr/bin:/bin"))
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("CODEX_DISABLE_TELEMETRY", "1")
        .env_remove("CODEX_HOME")
        .env_remove("CLAUDE_CONFIG_DIR")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .envs(vars.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = Output::from(out);
    eprintln!("$ {} {}\n{}{}", program.file_name().unwrap().to_string_lossy(), args.join(" "), out.stdout, out.stderr);
    out
}

/// Claude Code reads what `cordon mcp config claude-code --write` wrote (user and project scope,
/// stdio and HTTP), starts the server against a real cordond and reports it connected; its own
/// keys in ~/.claude.json survive; `--remove` takes it out of its list.
#[test]
fn claude_code_lists_the_server_cordon_wrote() {
    let (claude, _) = match agent_hosts() {
        Ok(h) => h,
        Err(why) => return skip_or_fail(Skip::MissingTool("the agent hosts (Claude Code, Codex)"), &why),
    };
    let version = host_cli(&Place::new(), &claude, &["--version"]);
    assert!(version.stdout.starts_with(CLAUDE_CODE_VERSION), "pinned {CLAUDE_CODE_VERSION}: {version:?}");
    let daemon = Daemon::start(&[("t.toml", concat!(fixture!(header "5s"), fixture!(echo)))]);
    let p = Place::new();
    let sock = daemon.socket.to_str().unwrap();
    // Claude Code's own file first: it writes its keys there, which the merge keeps.
    host_cli(&p, &claude, &["mcp", "list"]).assert_code(0);
    let own: Value = json_file(&p.home.join(".claude.json"));
    let out = p.cordon(&["--socket", sock, "mcp", "config", "claude-code", "--scope", "user", "--write"]);
    out.assert_code(0);
    let merged = json_file(&p.home.join(".claude.json"));
    for (k, v) in own.as_object().unwrap() {
        if k != "mcpServers" {
            assert_eq!(&merged[k], v, "Claude Code's key {k} kept");
        }
    }
    // A copy whose command does not exist: the host really starts what the entry names.
    let mut broken = merged.clone();
    broken["mcpServers"]["broken"] = json!({"type": "stdio", "command": "/nonexistent/cordon", "args": ["mcp"]});
    fs::write(p.home.join(".claude.json"), serde_json::to_string_pretty(&broken).unwrap()).unwrap();

    let list = host_cli(&p, &claude, &["mcp", "list"]);
    list.assert_code(0);
    let line = |name: &str| list.stdout.lines().find(|l| l.starts_with(&format!("{name}: "))).unwrap_or("").to_string();
    assert!(line("cordon").contains(&format!("{} mcp --socket {sock}", exe())), "{}", list.stdout);
    assert!(line("cordon").contains("Connected"), "{}", list.stdout);
    assert!(!line("broken").contains("Connected") && line("broken").contains("Failed"), "{}", list.stdout);
    let get = host_cli(&p, &claude, &["mcp", "get", "cordon"]);
    get.assert_code(0);
    assert!(get.stdout.contains("Type: stdio") && get.stdout.contains(&format!("Command: {}", exe())), "{get:?}");
    assert!(get.stdout.contains(&format!("Args: mcp --socket {sock}")), "{get:?}");

    // HTTP, with the token from the environment.
    let out = p.cordon(&[
        "mcp",
        "config",
        "claude-code",
        "--scope",
        "user",
        "--write",
        "--name",
        "cordon-http",
        "--http",
        URL,
    ]);
    out.assert_code(0);
    let get = host_cli(&p, &claude, &["mcp", "get", "cordon-http"]);
    assert!(get.stdout.contains("Type: http") && get.stdout.contains(&format!("URL: {URL}")), "{get:?}");

    // The project's .mcp.json: listed as the project's (Claude Code asks before it starts one).
    let out = p.cordon(&["--socket", sock, "mcp", "config", "claude-code", "--write", "--name", "cordon-project"]);
    out.assert_code(0);
    let get = host_cli(&p, &claude, &["mcp", "get", "cordon-project"]);
    assert!(get.stdout.contains("Project config"), "{get:?}");

    for name in ["cordon", "cordon-http"] {
        p.cordon(&["mcp", "config", "claude-code", "--scope", "user", "--remove", "--name", name]).assert_code(0);
    }
    let list = host_cli(&p, &claude, &["mcp", "list"]);
    assert!(!list.stdout.contains("cordon: ") && !list.stdout.contains("cordon-http"), "{}", list.stdout);
    assert!(list.stdout.contains("broken: "), "{}", list.stdout);
    let get = host_cli(&p, &claude, &["mcp", "get", "cordon"]);
    assert_ne!(get.code, Some(0), "{get:?}");
}

/// Over HTTP: Claude Code expands the `${CORDON_MCP_TOKEN}` reference cordon wrote and reaches a
/// real `cordon mcp --http` (in the same network namespace) with a token cordond issued; with a
/// token cordond does not know, the same entry does not connect.
#[test]
fn claude_code_reaches_cordon_http_with_the_referenced_token() {
    let (claude, _) = match agent_hosts() {
        Ok(h) => h,
        Err(why) => return skip_or_fail(Skip::MissingTool("the agent hosts (Claude Code, Codex)"), &why),
    };
    cordon_tests::agent::ensure();
    let daemon = Daemon::start(&[("t.toml", concat!(fixture!(header "5s"), fixture!(echo)))]);
    let out = daemon.cordon(&["token", "issue", cordon_tests::agent::AGENT, "--label", "mcp config test"]);
    out.assert_code(0);
    let token = out.stdout.trim().to_string();
    let p = Place::new();
    let url = "http://127.0.0.1:8765/mcp";
    p.cordon(&["mcp", "config", "claude-code", "--scope", "user", "--write", "--http", url]).assert_code(0);
    assert!(!fs::read_to_string(p.home.join(".claude.json")).unwrap().contains(&token));
    // The front-end and the host in one fresh network namespace: loopback only, port 8765 free.
    let script = format!(
        "{cordon} --socket {sock} mcp --http 127.0.0.1:8765 2>/dev/null & front=$!; \
         i=0; while ! curl -s -o /dev/null http://127.0.0.1:8765/ && [ $i -lt 100 ]; do i=$((i+1)); sleep 0.1; done; \
         \"$@\"; code=$?; kill $front; exit $code",
        cordon = bin("cordon").display(),
        sock = daemon.socket.display(),
    );
    // Well-formed, but not a secret cordond issued: refused by cordond, not by its shape.
    let tail = if token.ends_with("0000") { "1111" } else { "0000" };
    let unknown = format!("{}{tail}", &token[..token.len() - 4]);
    for (value, connects) in [(token.as_str(), true), (unknown.as_str(), false)] {
        let out = host_cli_with(&p, &script, &claude, &["mcp", "list"], &[("CORDON_MCP_TOKEN", value)]);
        out.assert_code(0);
        let line = out.stdout.lines().find(|l| l.starts_with("cordon: ")).unwrap_or("").to_string();
        assert!(line.contains(url), "{}", out.stdout);
        assert_eq!(line.contains("Connected"), connects, "token known to cordond: {connects}: {}", out.stdout);
    }
}

/// Codex reads what `cordon mcp config codex --write` wrote (stdio and HTTP), and `--remove`
/// takes it out of its list.
#[test]
fn codex_lists_the_server_cordon_wrote() {
    let (_, codex) = match agent_hosts() {
        Ok(h) => h,
        Err(why) => return skip_or_fail(Skip::MissingTool("the agent hosts (Claude Code, Codex)"), &why),
    };
    let p = Place::new();
    let version = host_cli(&p, &codex, &["--version"]);
    assert!(version.stdout.contains(CODEX_VERSION), "pinned {CODEX_VERSION}: {version:?}");
    let daemon = Daemon::start(&[("t.toml", concat!(fixture!(header "5s"), fixture!(echo)))]);
    let sock = daemon.socket.to_str().unwrap();
    let codex_dir = p.home.join(".codex");
    fs::create_dir_all(&codex_dir).unwrap();
    fs::write(codex_dir.join("config.toml"), "# mine\n[mcp_servers.docs]\ncommand = \"/bin/true\"\n").unwrap();
    p.cordon(&["--socket", sock, "mcp", "config", "codex", "--write"]).assert_code(0);
    p.cordon(&["mcp", "config", "codex", "--write", "--name", "cordon-http", "--http", URL]).assert_code(0);

    let list = host_cli(&p, &codex, &["mcp", "list"]);
    list.assert_code(0);
    let row = list.stdout.lines().find(|l| l.starts_with("cordon ")).unwrap_or("").to_string();
    assert!(row.contains(&exe()) && row.contains(&format!("mcp --socket {sock}")), "{}", list.stdout);
    assert!(list.stdout.lines().any(|l| l.starts_with("docs ")), "{}", list.stdout);
    assert!(list.stdout.contains("cordon-http") && list.stdout.contains(URL), "{}", list.stdout);
    let get = host_cli(&p, &codex, &["mcp", "get", "cordon"]);
    get.assert_code(0);
    assert!(get.stdout.contains("transport: stdio") && get.stdout.contains(&format!("command: {}", exe())), "{get:?}");
    assert!(get.stdout.contains(&format!("args: mcp --socket {sock}")), "{get:?}");
    let get = host_cli(&p, &codex, &["mcp", "get", "cordon-http", "--json"]);
    get.assert_code(0);
    let j = get.json();
    assert_eq!(j["transport"]["url"], URL, "{j}");
    assert_eq!(j["transport"]["bearer_token_env_var"], "CORDON_MCP_TOKEN", "{j}");

    for name in ["cordon", "cordon-http"] {
        p.cordon(&["mcp", "config", "codex", "--remove", "--name", name]).assert_code(0);
    }
    let list = host_cli(&p, &codex, &["mcp", "list"]);
    assert!(!list.stdout.contains("cordon"), "{}", list.stdout);
    assert!(list.stdout.lines().any(|l| l.starts_with("docs ")), "{}", list.stdout);
    assert!(fs::read_to_string(codex_dir.join("config.toml")).unwrap().starts_with("# mine\n"));
}
