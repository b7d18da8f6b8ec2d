//! Secrets: a tool's `secrets` table against the file's `[secrets.NAME]` declarations, and the
//! availability reasons of a source that is missing or that someone but root could read or
//! change (the same checks cordond makes again at each call).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use cordon_core::policy::{Availability, Host, PolicySet, load_sources};
use cordon_core::secret::{Placement, SecretSource, read_source};

fn host() -> Host {
    Host { credentials: None, ..Host::new(false, 6) }
}

fn load(text: &str) -> PolicySet {
    match load_sources(&[(PathBuf::from("secrets.toml"), text.to_string())], &host()) {
        Ok(set) => set,
        Err(e) => panic!("expected the policy to load, got:\n{e}"),
    }
}

fn policy(source: &Path) -> String {
    format!(
        r#"version = 1

[secrets.github]
source = {{ file = "{}" }}
hosts = ["api.github.com:443"]
header = "Authorization"

[tools.gh]
description = "calls the GitHub API"
reason = "test"
command = ["true"]
network = {{ hosts = ["api.github.com:443", "example.com:443"] }}
secrets = {{ GH_TOKEN = "github" }}
"#,
        source.display()
    )
}

/// A directory every parent of which only root (or this test's user) can write.
fn trusted_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("secrets").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

fn reason(set: &PolicySet) -> Option<String> {
    match &set.tools[0].availability {
        Availability::Available { .. } => None,
        Availability::Unavailable { reason } => Some(reason.clone()),
    }
}

#[test]
fn a_tool_gets_its_secret_by_variable_with_hosts_and_place() {
    let dir = trusted_dir();
    let file = dir.path().join("token");
    std::fs::write(&file, "ghp_real\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let set = load(&policy(&file));
    let tool = &set.tools[0];
    assert_eq!(reason(&set), None, "a root-owned 0600 file in a trusted directory is a good source");
    assert_eq!(tool.secrets.len(), 1);
    let s = &tool.secrets[0];
    assert_eq!(s.env, "GH_TOKEN");
    assert_eq!(s.decl.name, "github");
    assert_eq!(s.decl.source, SecretSource::File(file.clone()));
    assert_eq!(s.decl.place, Placement::Header("authorization".into()));
    assert_eq!(s.decl.hosts.iter().map(ToString::to_string).collect::<Vec<_>>(), ["api.github.com:443"]);
    assert!(tool.terminated());
    // Nothing of the value is kept in the tool (its Debug form is what logs could show).
    assert!(!format!("{tool:?}").contains("ghp_real"));
    // One trailing newline is dropped.
    assert_eq!(read_source(&s.decl.source, None, 0).unwrap().as_slice(), b"ghp_real");
}

#[test]
fn a_missing_group_readable_or_foreign_source_makes_the_tool_unavailable() {
    let dir = trusted_dir();
    let file = dir.path().join("token");
    let missing = reason(&load(&policy(&file))).expect("a missing source");
    assert!(missing.contains("secret \"github\" (GH_TOKEN)") && missing.contains("does not exist"), "{missing}");

    std::fs::write(&file, "v").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let group = reason(&load(&policy(&file))).expect("a group-readable source");
    assert!(group.contains("mode 0640") && group.contains("chmod 600"), "{group}");

    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let dir_writable = reason(&load(&policy(&file))).expect("a source in a directory others can write");
    assert!(dir_writable.contains("writable by its group or others"), "{dir_writable}");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();

    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    let symlink = reason(&load(&policy(&link))).expect("a symlink");
    assert!(symlink.contains("is a symlink"), "{symlink}");

    if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::chown(&file, Some(65534), None).unwrap();
        let foreign = reason(&load(&policy(&file))).expect("a source owned by another user");
        assert!(foreign.contains("owned by uid 65534"), "{foreign}");
    } else {
        // cordon_tests::Skip::NotRoot: CI runs as root, so it fails there.
        let line = "SKIPPED a source owned by another user [not root] chown needs root";
        assert!(std::env::var_os("CORDON_CI").is_none(), "{line} (CORDON_CI is set: CI runs as root)");
        eprintln!("{line}");
    }
}

#[test]
fn a_credential_needs_cordonds_credentials_directory() {
    let text = policy(Path::new("/x")).replace(r#"{ file = "/x" }"#, r#"{ credential = "gh" }"#);
    let why = reason(&load(&text)).expect("no $CREDENTIALS_DIRECTORY");
    assert!(why.contains("has no $CREDENTIALS_DIRECTORY"), "{why}");
    let dir = trusted_dir();
    std::fs::write(dir.path().join("gh"), "v").unwrap();
    std::fs::set_permissions(dir.path().join("gh"), std::fs::Permissions::from_mode(0o400)).unwrap();
    let host = Host { credentials: Some(dir.path().to_path_buf()), ..host() };
    let set = load_sources(&[(PathBuf::from("secrets.toml"), text)], &host).unwrap();
    // At load (the daemon and each call read its own $CREDENTIALS_DIRECTORY, which this test
    // process has not).
    assert!(matches!(set.tools[0].availability, Availability::Available { .. }), "{:?}", set.tools[0].availability);
}

#[test]
fn a_value_that_cannot_go_in_its_place_is_refused_without_being_shown() {
    use cordon_core::secret::check_value;
    let e = check_value("k", b"tok\r\nX-Evil: 1", &Placement::Header("authorization".into())).unwrap_err();
    assert!(e.contains("control character") && !e.contains("tok"), "{e}");
    assert!(check_value("k", b"a:b", &Placement::BasicUser).is_err());
    // The proxy percent-encodes a query parameter's value when it puts it in.
    assert!(check_value("k", b"a&b c", &Placement::Query("key".into())).is_ok());
    assert!(check_value("k", b"ghp_abc", &Placement::Header("authorization".into())).is_ok());
}

#[test]
fn the_reference_lists_the_secret_keys() {
    let text = cordon_core::policy::reference::authoring_reference();
    for needle in [
        "`[secrets.NAME]`",
        "`source`",
        "`basic`",
        "{ VAR = \"NAME\" }",
        "`[tools.NAME]` `secrets` entry table",
        "file = true",
    ] {
        assert!(text.contains(needle), "missing {needle}");
    }
}

#[test]
fn a_tool_gets_its_secret_in_a_file_by_the_table_form() {
    let dir = trusted_dir();
    let file = dir.path().join("token");
    std::fs::write(&file, "ghp_real").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let text = policy(&file).replace(
        r#"secrets = { GH_TOKEN = "github" }"#,
        r#"secrets = { GH_TOKEN_FILE = { secret = "github", file = true } }"#,
    );
    let set = load(&text);
    assert_eq!(reason(&set), None);
    let s = &set.tools[0].secrets[0];
    assert_eq!((s.env.as_str(), s.decl.name.as_str(), s.file), ("GH_TOKEN_FILE", "github", true));
    assert_eq!(cordon_core::secret::secret_file_name(&s.env), "cordon-secret-GH_TOKEN_FILE");
    // `file = false` is the variable form, written as a table.
    let text = policy(&file).replace(
        r#"secrets = { GH_TOKEN = "github" }"#,
        r#"secrets = { GH_TOKEN = { secret = "github", file = false } }"#,
    );
    let s = &load(&text).tools[0].secrets[0];
    assert_eq!((s.env.as_str(), s.file), ("GH_TOKEN", false));
    // The plain form is not a file.
    assert!(!load(&policy(&file)).tools[0].secrets[0].file);
}
