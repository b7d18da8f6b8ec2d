//! Shell completions and man pages come from the real clap definitions: `cordon completions
//! SHELL` prints a script the shell accepts, and the hidden `cordon man --dir` and
//! `cordond --man-dir` write one page per command (what packaging/install.sh installs).

use std::process::Command;

use cordon_tests::bin;

#[test]
fn completions_are_printed_for_every_shell_and_bash_loads_its_script() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = Command::new(bin("cordon")).args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}: {out:?}");
        let script = String::from_utf8(out.stdout).unwrap();
        // Every subcommand is offered, including the newest.
        for sub in ["run", "policy", "audit", "completions"] {
            assert!(script.contains(sub), "{shell}: no {sub} in the script");
        }
    }
    let out = Command::new(bin("cordon")).args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "an unknown shell is a usage error: {out:?}");

    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("cordon.bash");
    let out = Command::new(bin("cordon")).args(["completions", "bash"]).output().unwrap();
    std::fs::write(&script, out.stdout).unwrap();
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("source {}; complete -p cordon", script.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("-F _cordon cordon"), "{out:?}");
}

#[test]
fn man_pages_are_written_per_command_for_cordon_and_cordond() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = Command::new(bin("cordon")).args(["man", "--dir", d]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let out = Command::new(bin("cordond")).args(["--man-dir", d]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut pages: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    pages.sort();
    for page in [
        "cordon.1",
        "cordon-run.1",
        "cordon-policy-check.1",
        "cordon-audit-tail.1",
        "cordon-completions.1",
        "cordond.8",
    ] {
        assert!(pages.contains(&page.to_string()), "{page} missing from {pages:?}");
    }
    // Hidden commands get no page; every page is roff with its title.
    assert!(!pages.iter().any(|p| p == "cordon-man.1" || p == "cordon-help.1"), "{pages:?}");
    for page in &pages {
        let text = std::fs::read_to_string(dir.path().join(page)).unwrap();
        assert!(text.contains(".TH "), "{page} is not a man page");
    }
    let cordond = std::fs::read_to_string(dir.path().join("cordond.8")).unwrap();
    assert!(cordond.contains("policies") && !cordond.contains("man\\-dir"), "{cordond}");

    // A directory that does not exist: an error that says so, not a panic.
    let out = Command::new(bin("cordon")).args(["man", "--dir", "/nonexistent/man"]).output().unwrap();
    assert!(!out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot write the man pages"), "{out:?}");
}
