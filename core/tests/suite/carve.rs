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
