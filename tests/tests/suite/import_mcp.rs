//! `cordon import mcp`: the MCP servers of agent hosts' own configs (Claude Desktop, Claude
//! Code's `.mcp.json`, Cursor, Windsurf, Codex's TOML; tests/fixtures/import/mcp/) imported by
//! the real `cordon` into `[servers.NAME]` tables that expose nothing, point `npx`/`uvx` servers
//! at their installed copy (with the install command), never copy a secret, and list remote
//! servers as not imported; checked with `cordon policy check` before and after the installs.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use cordon_tests::{Output, cordon_at};

const UNLISTED: &str = "tools = [\"TODO list the tools agents may call\"]";

/// The fixture `name` with `@DIR@` replaced by `dir`, written into `dir`.
fn fixture_in(name: &str, dir: &Path) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/import/mcp").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let out = dir.join(name);
    std::fs::write(&out, text.replace("@DIR@", s(dir))).unwrap();
    out
}

fn cordon(args: &[&str]) -> Output {
    cordon_at(Path::new("/nonexistent/cordon.sock"), args)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn executable(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn workspace() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::Builder::new().prefix("cordon-import-mcp-").tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    let install = dir.path().join("mcp");
    (dir, policies, install)
}

/// Claude Desktop's config: the npx and uvx servers are pointed at their installed copies with
/// the install command, the paths the host gave are suggested and not granted, the token is not
/// in the file, a loader variable is dropped, nothing is exposed; `policy check` passes, each
/// server unavailable until installed, then available.
#[test]
fn a_claude_desktop_config_becomes_servers_to_review_that_check_once_installed() {
    let (dir, policies, install) = workspace();
    let config = fixture_in("claude_desktop_config.json", dir.path());
    let policy = policies.join("claude.toml");
    let out = cordon(&["import", s(&config), "--install-root", s(&install), "-o", s(&policy)]);
    out.assert_code(0);
    assert!(out.stdout.contains("wrote") && out.stdout.contains("4 server(s)"), "{out:#?}");
    assert!(
        out.stderr.contains(
            "server \"GitHub\": env GITHUB_PERSONAL_ACCESS_TOKEN looked secret and was not copied; declare each as a secret"
        ),
        "{out:#?}"
    );
    let text = std::fs::read_to_string(&policy).unwrap();
    assert!(!text.contains("ghp_9f8e7d6c5b4a"), "a secret was copied into the policy:\n{text}");
    // Comments are wrapped: read them as one line each.
    let text = text.replace("\n#   ", " ");
    assert!(!text.contains("LD_PRELOAD = "), "{text}");
    assert_eq!(text.matches(UNLISTED).count(), 4, "{text}");
    let i = s(&install);
    for want in [
        "[servers.filesystem]".to_string(),
        format!(
            "command = [\"{i}/filesystem/node_modules/.bin/mcp-server-filesystem\", \"{d}/Documents\", \"{d}/Desktop\"]",
            d = s(dir.path())
        ),
        format!("exec = [\"{i}/filesystem\"]"),
        format!("`npm install --prefix {i}/filesystem"),
        "[servers.git]".into(),
        format!("command = [\"{i}/git/bin/mcp-server-git\", \"--repository\", \"{}/src/project\"]", s(dir.path())),
        format!("python3 -m venv {i}/git && {i}/git/bin/pip"),
        "[servers.github]".into(),
        "# Named \"GitHub\" in".into(),
        "env = { LOG_LEVEL = \"debug\" }".into(),
        "# [secrets.github-github-personal-access-token]".into(),
        "[servers.local-tools]".into(),
        "Not copied from env: LD_PRELOAD".into(),
    ] {
        assert!(text.contains(&want), "{want} missing:\n{text}");
    }
    // Suggested, not granted.
    assert!(
        !text.lines().any(|l| (l.starts_with("read") || l.starts_with("write")) && l.contains("Documents")),
        "{text}"
    );
    assert!(text.contains(&format!("e.g. read = [\"{d}/Documents\", \"{d}/Desktop\"]", d = s(dir.path()))), "{text}");

    let check = cordon(&["policy", "check", s(&policy)]);
    check.assert_code(0);
    assert!(check.stdout.contains("0 tool(s) and 4 server(s) in 1 file(s)"), "{check:#?}");
    assert!(
        check
            .stdout
            .contains(&format!("unavailable on this host: {i}/filesystem/node_modules/.bin/mcp-server-filesystem")),
        "{check:#?}"
    );

    // What the comments say to install, installed.
    executable(&install.join("filesystem/node_modules/.bin/mcp-server-filesystem"), "#!/bin/sh\n");
    executable(&install.join("github/node_modules/.bin/mcp-server-github"), "#!/bin/sh\n");
    executable(&install.join("git/bin/mcp-server-git"), "#!/bin/sh\n");
    executable(&dir.path().join("bin/local-mcp"), "#!/bin/sh\n");
    let check = cordon(&["policy", "check", s(&policy)]);
    check.assert_code(0);
    assert!(check.stdout.contains("0 tool(s) and 4 server(s) in 1 file(s)"), "{check:#?}");
    assert!(!check.stdout.contains("unavailable"), "{check:#?}");
}

/// Claude Code's `.mcp.json`, Cursor's, Windsurf's and Codex's TOML: the versions they pin are
/// kept in the install command, remote servers are listed as not imported, a placeholder env
/// value is a secret, an installed package's own program name is used, a disabled server says
/// so, and an entry without a command is skipped with its reason (exit 4, the rest written).
#[test]
fn every_hosts_shape_imports() {
    let (dir, _policies, install) = workspace();
    let i = s(&install);

    let flat = |out: &Output| out.stdout.replace("\n#   ", " ");
    let out = cordon(&["import", "mcp", s(&fixture_in("dot-mcp.json", dir.path())), "--install-root", i]);
    out.assert_code(0);
    assert!(
        flat(&out).contains("[servers.fetch]") && flat(&out).contains("'mcp-server-fetch==2026.10.24'"),
        "{out:#?}"
    );
    assert!(flat(&out).contains(&format!("command = [\"{i}/fetch/bin/mcp-server-fetch\"]")), "{out:#?}");
    assert!(
        out.stdout
            .contains("# NOT IMPORTED: \"sentry\": a remote server (https://mcp.sentry.dev/mcp) is not supported"),
        "{out:#?}"
    );
    assert!(!flat(&out).contains("[servers.sentry]"), "{out:#?}");

    // Cursor: the package is installed already, its program is not named like the package.
    let pkg = install.join("acme/node_modules/@acme/weird-server");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(pkg.join("package.json"), r#"{"name": "@acme/weird-server", "bin": {"acme-weird": "cli.js"}}"#)
        .unwrap();
    let out = cordon(&["import", s(&fixture_in("cursor-mcp.json", dir.path())), "--install-root", i]);
    out.assert_code(4);
    assert!(
        flat(&out).contains(&format!("command = [\"{i}/acme/node_modules/.bin/acme-weird\", \"--port\", \"0\"]")),
        "{out:#?}"
    );
    assert!(flat(&out).contains("@acme/weird-server@1.2.3`"), "{out:#?}");
    assert!(flat(&out).contains("env = { ACME_REGION = \"eu-west-1\" }"), "{out:#?}");
    assert!(!flat(&out).contains("${env:ACME_API_KEY}"), "{out:#?}");
    assert!(flat(&out).contains("# [secrets.acme-acme-api-key]"), "{out:#?}");
    assert!(
        out.stderr.contains("skipped") && out.stderr.contains("server \"no-command\" has no \"command\""),
        "{out:#?}"
    );

    let out = cordon(&["import", s(&fixture_in("windsurf-mcp_config.json", dir.path())), "--install-root", i]);
    out.assert_code(0);
    assert!(flat(&out).contains("# The host had this server disabled."), "{out:#?}");
    assert!(flat(&out).contains(&format!("{i}/everything/node_modules/.bin/mcp-server-everything")), "{out:#?}");
    assert!(
        flat(&out).contains("\"linear\": a remote server (https://mcp.linear.app/sse) is not supported"),
        "{out:#?}"
    );

    let out = cordon(&["import", s(&fixture_in("codex-config.toml", dir.path())), "--install-root", i]);
    out.assert_code(0);
    assert!(flat(&out).contains("[servers.git]") && flat(&out).contains("'mcp-server-git==2026.10.19'"), "{out:#?}");
    assert!(flat(&out).contains("env = { GIT_AUTHOR_NAME = \"Codex\" }"), "{out:#?}");
    assert!(
        flat(&out).contains("\"docs\": a remote server (https://docs.example.com/mcp) is not supported"),
        "{out:#?}"
    );
    assert_eq!(out.stdout.matches(UNLISTED).count(), 1, "{out:#?}");
}

/// Nothing importable: refused, nothing written; options of other formats refused; a host's
/// config in the policy directory names the import command.
#[test]
fn bad_mcp_configs_are_refused_with_what_to_do() {
    let (dir, policies, _install) = workspace();
    let only_bad = dir.path().join("bad.json");
    std::fs::write(&only_bad, r#"{"mcpServers": {"9lives": {"command": "x"}}}"#).unwrap();
    let target = dir.path().join("out.toml");
    let out = cordon(&["import", s(&only_bad), "-o", s(&target)]);
    out.assert_code(65);
    assert!(out.stderr.contains("cordon's server names start with a letter"), "{out:#?}");
    assert!(!target.exists());

    let out = cordon(&["import", "mcp", s(&only_bad), "--namespace", "x"]);
    out.assert_code(2);
    assert!(out.stderr.contains("--project-root and --namespace apply to CtxNest configs only"), "{out:#?}");
    let ctx = dir.path().join("ctxnest.json");
    std::fs::write(&ctx, r#"{"version": "1", "tools": {}}"#).unwrap();
    let out = cordon(&["import", s(&ctx), "--install-root", "/opt/x"]);
    out.assert_code(2);
    assert!(out.stderr.contains("--install-root applies to a host's MCP servers only"), "{out:#?}");

    let config = policies.join("claude_desktop_config.json");
    std::fs::write(&config, r#"{"mcpServers": {}}"#).unwrap();
    let out = cordon(&["policy", "check", s(&config)]);
    out.assert_code(65);
    assert!(
        out.stderr.contains(&format!(
            "convert it with `cordon import mcp {} -o {}`",
            s(&config),
            s(&policies.join("claude_desktop_config.toml"))
        )),
        "{out:#?}"
    );
}
