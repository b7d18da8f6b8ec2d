//! `cordon tool add|remove` against a real daemon: a checked change lands as one file and is
//! reloaded; a refused one leaves the directory byte for byte as it was and the generation where
//! it was; agent users are told that only admins may do it. `cordon tool NAME` still shows, and
//! a tool named like a subcommand is reached with `cordon tool show NAME`.
//! And `cordon policy check --tool NAME`.

use std::collections::BTreeMap;
use std::path::Path;

use cordon_tests::{Daemon, agent, fixture, require_root};

const BASE: &str = concat!(fixture!(header "20s"), fixture!(echo), fixture!(off));

/// Every file of the directory, by name, with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().into_string().unwrap(), std::fs::read(e.path()).unwrap())
        })
        .collect()
}

fn generation(d: &Daemon) -> u64 {
    d.cordon(&["status", "--json"]).json()["generation"].as_u64().unwrap()
}

fn tool_file(name: &str, text: &str) -> String {
    format!(
        r#"version = 1
# an admin's comment, kept as written

[tools.{name}]
description = "print a fixed word"
reason = "tool_admin tests"
command = ["/usr/bin/printf", "{text}"]
"#
    )
}

#[test]
fn add_run_replace_and_remove_a_tool() {
    require_root!("the policy directory is root's and the daemon runs tools as the caller");
    let d = Daemon::start(&[("base.toml", BASE)]);
    let work = tempfile::tempdir().unwrap();
    let snippet = work.path().join("hello.toml");
    std::fs::write(&snippet, tool_file("hello", "hi-there")).unwrap();
    let before = generation(&d);

    let out = d.cordon(&["tool", "add", "--file", snippet.to_str().unwrap()]);
    out.assert_code(0);
    assert!(out.stdout.contains("added hello"), "{out:?}");
    assert!(out.stdout.contains(&format!("generation {}", before + 1)), "{out:?}");
    // One file, the snippet as written (comments too), mode 0644; no temporary left behind.
    let installed = d.policies.join("hello.toml");
    assert_eq!(std::fs::read_to_string(&installed).unwrap(), tool_file("hello", "hi-there"));
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(std::fs::metadata(&installed).unwrap().permissions().mode() & 0o7777, 0o644);
    assert_eq!(snapshot(&d.policies).len(), 2, "{:?}", snapshot(&d.policies).keys());

    let tools = d.cordon(&["tools", "--json"]).json();
    assert!(tools["tools"].as_array().unwrap().iter().any(|t| t["name"] == "hello"), "{tools}");
    let (out, json) = d.run_json("hello", &serde_json::json!({}));
    assert_eq!(json["stdout"], "hi-there", "{out:?}");
    // `cordon tool NAME` still shows one tool.
    let out = d.cordon(&["tool", "hello"]);
    out.assert_code(0);
    assert!(out.stdout.contains("print a fixed word"), "{out:?}");

    // The same name again: refused unless --replace.
    std::fs::write(&snippet, tool_file("hello", "replaced")).unwrap();
    let out = d.cordon(&["tool", "add", "--file", snippet.to_str().unwrap()]);
    assert_eq!(out.code, Some(65), "a data error, as the exit-code table says: {out:?}");
    assert!(out.stderr.contains("already exists") && out.stderr.contains("--replace"), "{out:?}");
    let out = d.cordon(&["tool", "add", "--file", snippet.to_str().unwrap(), "--json"]);
    assert_eq!((out.code, out.json()["error"]["code"].clone()), (Some(65), "POLICY_REJECTED".into()), "{out:?}");
    let out = d.cordon(&["tool", "add", "--replace", "--file", snippet.to_str().unwrap(), "--json"]);
    out.assert_code(0);
    assert_eq!(out.json()["action"], "replaced", "{out:?}");
    let (_, json) = d.run_json("hello", &serde_json::json!({}));
    assert_eq!(json["stdout"], "replaced");
    // A name that base.toml defines among others: refused, with --replace too, naming the file.
    let echo = work.path().join("echo.toml");
    std::fs::write(&echo, tool_file("echo", "x")).unwrap();
    let out = d.cordon(&["tool", "add", "--file", echo.to_str().unwrap()]);
    assert_eq!(out.code, Some(65), "{out:?}");
    assert!(out.stderr.contains("base.toml"), "{out:?}");

    // Remove: its own file goes; the tool is gone after the reload.
    let g = generation(&d);
    let out = d.cordon(&["tool", "remove", "hello"]);
    out.assert_code(0);
    assert!(out.stdout.contains("removed hello") && out.stdout.contains(&format!("generation {}", g + 1)), "{out:?}");
    assert!(!installed.exists());
    let out = d.cordon(&["tool", "hello"]);
    assert_eq!(out.code, Some(66), "{out:?}");
    // An unknown name: not found, with the close names.
    let out = d.cordon(&["tool", "remove", "ecko"]);
    assert_eq!(out.code, Some(66), "{out:?}");
    assert!(out.stderr.contains("did you mean \"echo\""), "{out:?}");
    // A tool in a file with others written as [tools.NAME] tables: cut out of that file; the
    // other tool, the top of the file and its comments stay byte for byte.
    let base = d.policies.join("base.toml");
    let before = std::fs::read_to_string(&base).unwrap();
    let out = d.cordon(&["tool", "remove", "echo"]);
    out.assert_code(0);
    assert!(out.stdout.contains("removed echo"), "{out:?}");
    let after = std::fs::read_to_string(&base).unwrap();
    assert!(!after.contains("[tools.echo"), "{after}");
    let off = &before[before.find("[tools.off]").unwrap()..];
    assert!(after.ends_with(off), "the other tool is kept as written:\n{after}");
    assert!(after.starts_with(before[..before.find("[tools.echo]").unwrap()].trim_end_matches('\n')), "{after}");
    assert_eq!(d.cordon(&["tool", "echo"]).code, Some(66));
    let all = d.cordon(&["tools", "--all", "--json"]).json();
    assert!(all["tools"].as_array().unwrap().iter().any(|t| t["name"] == "off"), "{all}");
    // Tools written with dotted keys cannot be cut out as tables: refused, naming the file;
    // nothing changes.
    d.write_policy(
        "dotted.toml",
        "version = 1\n[tools]\nd1.description = \"one\"\nd1.reason = \"t\"\nd1.command = [\"/bin/true\"]\n\
         d2.description = \"two\"\nd2.reason = \"t\"\nd2.command = [\"/bin/true\"]\n",
    );
    d.cordon(&["reload"]).assert_code(0);
    let snap = snapshot(&d.policies);
    let out = d.cordon(&["tool", "remove", "d1"]);
    assert_eq!(out.code, Some(65), "a refused change (POLICY_REJECTED): {out:?}");
    assert!(out.stderr.contains("dotted.toml") && out.stderr.contains("by hand"), "{out:?}");
    assert_eq!(snapshot(&d.policies), snap);
}

#[test]
fn an_invalid_tool_is_refused_and_nothing_changes() {
    require_root!("the policy directory is root's");
    let d = Daemon::start(&[("base.toml", BASE)]);
    let work = tempfile::tempdir().unwrap();
    let before = snapshot(&d.policies);
    let g = generation(&d);
    let bad = work.path().join("bad.toml");
    // An unknown key and a placeholder without a param.
    std::fs::write(
        &bad,
        "version = 1\n[tools.bad]\ndescription = \"x\"\ncomand = [\"/bin/true\"]\ncommand = [\"/bin/echo\", \"{{nope}}\"]\n",
    )
    .unwrap();
    let out = d.cordon(&["tool", "add", "--file", bad.to_str().unwrap()]);
    assert_eq!(out.code, Some(65), "{out:?}");
    assert!(out.stderr.contains("bad.toml:4:") && out.stderr.contains("nothing was written"), "{out:?}");
    // Valid alone, but a duplicate of a tool in another file would break the directory; and two
    // tools in one file are refused.
    let two = work.path().join("two.toml");
    std::fs::write(
        &two,
        format!("{}\n[tools.other]\ndescription = \"o\"\ncommand = [\"/bin/true\"]\n", tool_file("one", "1")),
    )
    .unwrap();
    let out = d.cordon(&["tool", "add", "--file", two.to_str().unwrap()]);
    assert_eq!(out.code, Some(65), "{out:?}");
    assert!(out.stderr.contains("exactly one tool"), "{out:?}");
    // From stdin, with --json: the diagnostics as data.
    let out: cordon_tests::Output = std::process::Command::new(cordon_tests::bin("cordon"))
        .args(["--socket", d.socket.to_str().unwrap(), "tool", "add", "--file", "-", "--json"])
        .stdin(std::fs::File::open(&bad).unwrap())
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, Some(65), "{out:?}");
    let json = out.json();
    assert_eq!(json["ok"], false);
    assert!(json["diagnostics"].as_array().unwrap().iter().any(|d| d["severity"] == "error"), "{json}");

    assert_eq!(snapshot(&d.policies), before, "the directory is byte for byte as it was");
    assert_eq!(generation(&d), g, "no reload happened");
}

#[test]
fn agents_are_refused_with_what_to_do() {
    require_root!("to run cordon as the agent user");
    let d = Daemon::start_with(&[("base.toml", BASE)], &["--socket-group", agent::SOCKET_GROUP]);
    let work = tempfile::tempdir().unwrap();
    let snippet = work.path().join("hello.toml");
    std::fs::write(&snippet, tool_file("hello", "hi")).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let before = snapshot(&d.policies);
    for args in [vec!["tool", "add", "--file", snippet.to_str().unwrap()], vec!["tool", "remove", "echo"]] {
        let out = agent::cordon(&d.socket, &args);
        assert_eq!(out.code, Some(77), "{out:?}");
        assert!(out.stderr.contains("only admins") && out.stderr.contains("sudo cordon tool"), "{out:?}");
    }
    assert_eq!(snapshot(&d.policies), before);
}

#[test]
fn a_tool_named_like_a_subcommand_is_shown_with_show() {
    require_root!("the daemon shows admins every tool");
    let policy = concat!(
        fixture!(header "20s"),
        "\n[tools.add]\ndescription = \"a tool named add\"\nreason = \"tests\"\ncommand = [\"/bin/true\"]\n"
    );
    let d = Daemon::start(&[("base.toml", policy)]);
    let out = d.cordon(&["tool", "show", "add"]);
    out.assert_code(0);
    assert!(out.stdout.contains("a tool named add"), "{out:?}");
    // `cordon tool add` is the subcommand: it asks for --file.
    let out = d.cordon(&["tool", "add"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("--file"), "{out:?}");
    // And a bare `cordon tool` says what it wants.
    assert_eq!(d.cordon(&["tool"]).code, Some(2));
}

#[test]
fn policy_check_reports_one_tool() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.toml");
    let path = file.to_str().unwrap();
    let check = |args: &[&str]| {
        let mut all = vec!["policy", "check", "--tool"];
        all.extend_from_slice(args);
        all.push(path);
        cordon_tests::cordon_at(Path::new("/nonexistent.sock"), &all)
    };
    std::fs::write(&file, concat!(fixture!(header "20s"), fixture!(echo), fixture!(missing))).unwrap();
    let out = check(&["echo"]);
    out.assert_code(0);
    assert!(out.stdout.contains("status       available"), "{out:?}");
    assert_eq!(check(&["missing", "--json"]).json()["status"], "unavailable");
    let out = check(&["ecko"]);
    assert_eq!(out.code, Some(66), "{out:?}");
    assert!(out.stderr.contains("close names: echo"), "{out:?}");

    // A tool whose reason is still the placeholder is an error that rejects the whole load: the
    // echo report says so without showing the other tool's finding as its own.
    std::fs::write(
        &file,
        concat!(
            fixture!(header "20s"),
            fixture!(echo),
            fixture!(missing),
            "\n[tools.todo]\ndescription = \"d\"\nreason = \"TODO: why agents may run this\"\ncommand = [\"/bin/true\"]\n"
        ),
    )
    .unwrap();
    let out = check(&["echo"]);
    out.assert_code(65);
    assert!(out.stdout.contains("status       rejected"), "{out:?}");
    assert!(out.stdout.contains("1 more error(s) reject the whole load"), "{out:?}");
    assert!(!out.stderr.contains("TODO"), "another tool's finding is not this tool's: {out:?}");
    let out = check(&["todo"]);
    out.assert_code(65);
    assert!(out.stderr.contains("`reason` is still a placeholder"), "{out:?}");
}

/// A file's `namespace` is part of its tools' names: `tool remove build` does not remove the
/// file of `proj__build`, `tool remove proj__build` does, and `tool add --replace` replaces a
/// namespaced tool in its own file.
#[test]
fn namespaced_tools_are_found_by_their_full_name() {
    require_root!("the policy directory is root's");
    let ns = format!("version = 1\nnamespace = \"proj\"\n{}", &tool_file("build", "ns-build")["version = 1\n".len()..]);
    let d = Daemon::start(&[("base.toml", BASE), ("proj.toml", &ns)]);
    let snap = snapshot(&d.policies);
    // `build` is not a tool: only `proj__build` is.
    let out = d.cordon(&["tool", "remove", "build"]);
    assert_eq!(out.code, Some(66), "{out:?}");
    assert!(out.stderr.contains("proj__build"), "the close name is the namespaced one: {out:?}");
    assert_eq!(snapshot(&d.policies), snap, "nothing was removed");
    // --replace finds the namespaced tool's own file.
    let work = tempfile::tempdir().unwrap();
    let snippet = work.path().join("proj.toml");
    std::fs::write(&snippet, ns.replace("ns-build", "ns-replaced")).unwrap();
    let out = d.cordon(&["tool", "add", "--replace", "--file", snippet.to_str().unwrap()]);
    out.assert_code(0);
    assert!(std::fs::read_to_string(d.policies.join("proj.toml")).unwrap().contains("ns-replaced"));
    assert_eq!(snapshot(&d.policies).len(), 2, "{:?}", snapshot(&d.policies).keys());
    let out = d.cordon(&["tool", "remove", "proj__build"]);
    out.assert_code(0);
    assert!(!d.policies.join("proj.toml").exists());
}
