//! The registry at scale, from outside: descriptors held by cordond do not grow with the number
//! of tools that name the same paths, nor with reloads; a reload keeps serving the new set.

use std::path::Path;

use cordon_tests::{Daemon, toml_str};

/// `count` tools, each granting the same two directories and running the same program.
fn many_tools(count: usize, dirs: [&Path; 2], marker: &str) -> String {
    let mut text = format!("version = 1\n[defaults]\nread = [{}, {}]\n", toml_str(dirs[0]), toml_str(dirs[1]));
    for i in 0..count {
        text.push_str(&format!(
            "[tools.t{i}]\ndescription = \"tool {i}{marker}\"\nreason = \"tests\"\ncommand = [\"/bin/echo\", \"{{{{w}}}}\"]\n\
             [tools.t{i}.params.w]\ntype = \"string\"\npattern = \"[a-z]+\"\nrequired = true\n"
        ));
    }
    text
}

fn open_fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

#[test]
fn pins_of_one_path_share_one_descriptor_across_tools_and_reloads() {
    let shared = tempfile::tempdir().unwrap();
    let (a, b) = (shared.path().join("a"), shared.path().join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    let one = Daemon::start(&[("t.toml", &many_tools(1, [&a, &b], ""))]);
    let base = open_fds(one.pid());
    let many = Daemon::start(&[("t.toml", &many_tools(500, [&a, &b], "")), ("u.toml", &many_tools(0, [&a, &b], ""))]);
    let with_many = open_fds(many.pid());
    // A descriptor per distinct path (and a few of the daemon's own), not per tool.
    assert!(with_many <= base + 4, "1 tool: {base} descriptors, 500 tools: {with_many}");
    for round in 0..3 {
        many.write_policy(
            "u.toml",
            &many_tools(100, [&a, &b], &format!(" (round {round})")).replace("[tools.t", "[tools.u"),
        );
        many.cordon(&["reload"]).assert_code(0);
        many.cordon(&["reload"]).assert_code(0);
    }
    let after = open_fds(many.pid());
    assert!(after <= base + 6, "1 tool: {base} descriptors, 600 tools after 6 reloads: {after}");
    let listed = many.cordon(&["--json", "tools"]).json();
    assert_eq!(listed["tools"].as_array().map_or(0, Vec::len), 600, "{listed}");
    assert_eq!(listed["generation"], 7);
}
