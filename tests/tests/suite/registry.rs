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

fn rss_kib(pid: i32) -> u64 {
    cordon_tests::proc_status_field(pid, "VmRSS").unwrap()
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

/// Reloads in which every tool changed (the worst case: nothing can be shared with the previous
/// generation) do not make the daemon's memory grow with each reload: the previous generation
/// goes, and its memory is given back (a generation kept alive would add its size each time).
#[test]
fn memory_does_not_grow_with_reloads() {
    let shared = tempfile::tempdir().unwrap();
    let (a, b) = (shared.path().join("a"), shared.path().join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    let d = Daemon::start(&[("t.toml", &many_tools(1000, [&a, &b], ""))]);
    d.cordon(&["reload"]).assert_code(0);
    let settled = rss_kib(d.pid());
    for round in 0..6 {
        d.write_policy("t.toml", &many_tools(1000, [&a, &b], &format!(" (round {round})")));
        d.cordon(&["reload"]).assert_code(0);
    }
    let after = rss_kib(d.pid());
    assert!(after <= settled + settled / 2, "RSS {settled} KiB after the first reload, {after} KiB after six more");
}
