//! Carve-outs in policy files: the table form of `read`/`write` entries loads into the tool's
//! `SandboxPolicy.carve` (the golden file `bad/carve-outs.toml` has every wrong input).

use std::path::PathBuf;

use cordon_core::policy::carve::Protected;
use cordon_core::policy::{Host, load_sources};

#[test]
fn table_entries_load_with_their_carve_outs() {
    let text = r#"
version = 1
[defaults]
write = [{ path = "/srv/shared", deny = ["secrets/"] }]
[tools.t]
description = "d"
command = ["/bin/true"]
write = ["/srv/a", { path = "/srv/proj", deny = [".env", "secrets/*.pem"], read_only = ["deploy/"], unprotect = [{ path = ".git/hooks", reason = "the tool installs hooks" }] }]
read = [{ path = "/srv/ro", deny = ["**/*.key"] }]
"#;
    let set = load_sources(&[(PathBuf::from("t.toml"), text.to_string())], &Host::new(false, 6)).unwrap();
    let t = set.tools.iter().find(|t| t.name == "t").unwrap();
    let s = &t.sandbox;
    assert_eq!(s.write, [PathBuf::from("/srv/shared"), PathBuf::from("/srv/a"), PathBuf::from("/srv/proj")]);
    assert_eq!(s.read, [PathBuf::from("/srv/ro")]);
    assert_eq!(s.carve.len(), 3, "{:#?}", s.carve);
    let proj = s.carve.iter().find(|c| c.root == std::path::Path::new("/srv/proj")).unwrap();
    assert!(proj.write);
    assert_eq!(proj.deny.iter().map(|p| p.text.as_str()).collect::<Vec<_>>(), [".env", "secrets/*.pem"]);
    assert_eq!(proj.read_only[0].text, "deploy/");
    assert!(proj.read_only[0].dir);
    assert!(proj.lifts(Protected::Hooks) && !proj.lifts(Protected::Config));
    assert_eq!(proj.unprotect[0].reason, "the tool installs hooks");
    let ro = s.carve.iter().find(|c| c.root == std::path::Path::new("/srv/ro")).unwrap();
    assert!(!ro.write && ro.deny[0].is_glob());
    assert!(s.carve.iter().any(|c| c.root == std::path::Path::new("/srv/shared")), "defaults' carve-outs add up");
    assert!(set.diagnostics.iter().all(|d| !d.is_error()));
}

#[test]
fn carve_outs_change_the_policy_json_and_nothing_else() {
    let plain = "version = 1\n[tools.t]\ndescription = \"d\"\ncommand = [\"/bin/true\"]\nwrite = [\"/srv/p\"]\n";
    let carved = plain.replace("write = [\"/srv/p\"]", "write = [{ path = \"/srv/p\", deny = [\".env\"] }]");
    let load = |text: &str| {
        let set = load_sources(&[(PathBuf::from("t.toml"), text.to_string())], &Host::new(false, 6)).unwrap();
        cordon_core::policy::fleet::describe(&set.tools[0])
    };
    let (a, b) = (load(plain), load(&carved));
    assert!(a.get("carve").is_none(), "no carve key without carve-outs (digests stay): {a}");
    assert_eq!(b["carve"][0]["deny"][0], ".env", "{b}");
    assert_eq!(a["write"], b["write"]);
}

/// A daemon without mount views: a tool with carve-outs, or with a write root that is a git work
/// tree whose protected set is not wholly lifted, is unavailable with the reason (fail closed).
#[test]
fn without_views_carve_outs_make_the_tool_unavailable_with_the_reason() {
    use cordon_core::policy::Availability;
    let dir = tempfile::tempdir().unwrap();
    let (plain, repo) = (dir.path().join("plain"), dir.path().join("repo"));
    std::fs::create_dir_all(&plain).unwrap();
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    let mut host = Host::new(false, 6);
    host.carve_unavailable = Some(Host::no_carve("user namespaces are disabled"));
    let tool = |name: &str, write: String| {
        format!("[tools.{name}]\ndescription = \"d\"\ncommand = [\"/bin/true\"]\nwrite = {write}\n")
    };
    let q = |p: &std::path::Path| format!("{:?}", p.to_str().unwrap());
    let lift_all = [".git/hooks", ".git/config", ".git/config.worktree", ".git"]
        .map(|e| format!("{{ path = \"{e}\", reason = \"the tool manages the repository\" }}"))
        .join(", ");
    let text = format!(
        "version = 1\n{}{}{}{}",
        tool("plain", format!("[{}]", q(&plain))),
        tool("denies", format!("[{{ path = {}, deny = [\".env\"] }}]", q(&plain))),
        tool("repo", format!("[{}]", q(&repo))),
        tool("lifted", format!("[{{ path = {}, unprotect = [{lift_all}] }}]", q(&repo))),
    );
    let set = load_sources(&[(PathBuf::from("t.toml"), text)], &host).unwrap();
    let reason = |name: &str| match &set.tools.iter().find(|t| t.name == name).unwrap().availability {
        Availability::Unavailable { reason } => Some(reason.clone()),
        _ => None,
    };
    assert_eq!(reason("plain"), None);
    assert_eq!(reason("lifted"), None);
    let r = reason("denies").expect("a tool with deny is unavailable");
    assert!(r.contains("has carve-outs") && r.contains("user namespaces are disabled"), "{r}");
    let r = reason("repo").expect("a git work tree's write root is unavailable");
    assert!(r.contains("is a git work tree") && r.contains("unprotect"), "{r}");
}
