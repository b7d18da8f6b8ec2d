//! The README's quick start and the admin's runbook are run by CI, so they cannot rot: the quick
//! start as written by `.ci/quickstart` (which reads it from README.md), and every shell command of
//! the runbook (docs/getting-started.md) is one that `tests/run` or the package test
//! (`packaging/test-deb.sh`) runs literally. (The gRPC section's grpcurl lines are examples for a
//! tool CI does not install; `tests/grpc-python` makes the same calls with a stock client.)

use std::path::Path;

fn repo_file(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `(section heading, command)` for every line of every ```sh block of a page.
fn sh_commands(page: &str) -> Vec<(String, String)> {
    let readme = repo_file(page);
    let (mut section, mut in_block, mut out) = (String::new(), false, Vec::new());
    for line in readme.lines() {
        if !in_block && line.starts_with("## ") {
            section = line.trim_start_matches('#').trim().to_string();
        }
        match (in_block, line.trim_start()) {
            (false, "```sh") => in_block = true,
            (true, "```") => in_block = false,
            (true, l) => {
                let command = l.split(" #").next().unwrap_or("").trim();
                if !command.is_empty() && !command.starts_with('#') {
                    out.push((section.clone(), command.to_string()));
                }
            }
            _ => {}
        }
    }
    out
}

#[test]
fn ci_runs_the_readme_quick_start_as_written() {
    let run = repo_file("tests/run");
    assert!(run.lines().any(|l| l.trim() == ".ci/quickstart"), "tests/run must run .ci/quickstart");
    let quick: Vec<String> =
        sh_commands("README.md").into_iter().filter(|(s, _)| s == "Quick start").map(|(_, c)| c).collect();
    assert!(quick.iter().any(|c| c == "target/release/cordond --policies policies/examples"), "{quick:?}");
    // The quick start builds what packaging/install.sh builds, with the same package selection:
    // a different selection unifies dependency features differently and compiles everything again.
    let install = repo_file("packaging/install.sh");
    let build = "cargo build --release --locked -p cordon-client -p cordon-daemon";
    assert!(install.contains(build), "packaging/install.sh no longer runs {build:?}");
    assert!(
        quick.iter().any(|c| c == "cargo build --release --locked -p cordon-daemon -p cordon-client"),
        "the quick start must build the packages install.sh builds: {quick:?}"
    );
    assert!(!quick.iter().any(|c| c.starts_with("cargo run")), "cargo run selects one package: {quick:?}");
    // The README's test command is the script CI runs; it builds every target, then tests.
    assert!(quick.iter().any(|c| c == "sudo tests/run"), "{quick:?}");
    let ci = repo_file(".ci/run");
    assert!(ci.contains("tests/run"), "CI must run the README's test command: {ci}");
    assert!(run.contains("cargo build --workspace --lib --bins --tests --locked"));
    assert!(run.contains("cargo clippy --workspace --all-targets --locked"));
    assert!(run.contains("cargo test --workspace --locked"));
}

#[test]
fn every_runbook_command_is_run_by_ci() {
    let ci = [repo_file("tests/run"), repo_file("packaging/test-deb.sh")].join("\n");
    let ran: Vec<String> = ci
        .lines()
        .map(|l| {
            let l = l.trim();
            l.strip_prefix("run ").unwrap_or(l).to_string()
        })
        .collect();
    let mut missing = Vec::new();
    let runbook = sh_commands("docs/getting-started.md");
    assert!(runbook.len() >= 10, "docs/getting-started.md lost its runbook: {runbook:?}");
    for (section, command) in runbook {
        // CI runs as root: `sudo X` is X there.
        let command = command.strip_prefix("sudo ").unwrap_or(&command);
        if !ran.iter().any(|l| l == command) {
            missing.push(format!("{section}: {command}"));
        }
    }
    assert!(
        missing.is_empty(),
        "docs/getting-started.md commands that neither tests/run nor packaging/test-deb.sh runs as written (add them there, \
         as `run COMMAND` in test-deb.sh):\n{}",
        missing.join("\n")
    );
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings (outside code blocks).
fn anchors(text: &str) -> Vec<String> {
    let mut in_block = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
        } else if !in_block && line.starts_with('#') {
            let heading = line.trim_start_matches('#');
            if heading.starts_with(' ') {
                out.push(anchor(heading));
            }
        }
    }
    out
}

/// The README is a front page and ARCHITECTURE.md an overview; reference and walk-throughs live in
/// the docs book (docs/), and every relative link among them leads to a file and heading that
/// exist.
#[test]
fn the_docs_stay_in_layers_and_every_link_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (name, limit) in [("README.md", 20_000), ("ARCHITECTURE.md", 20_000)] {
        let size = repo_file(name).len();
        assert!(size < limit, "{name} is {size} bytes: keep it under {limit}, moving reference into docs/");
    }
    let mut files = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    for dir in ["docs", "docs/reference"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    // The book's table of contents (mdbook) names every page, so none is left out of the book.
    let index = repo_file("docs/SUMMARY.md");
    let docs = root.join("docs");
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        if let Ok(name) = file.strip_prefix(&docs) {
            let name = name.to_string_lossy();
            if name != "SUMMARY.md" {
                assert!(index.contains(&format!("]({name})")), "docs/SUMMARY.md does not list {name}");
            }
        }
        for (i, _) in text.match_indices("](") {
            let rest = &text[i + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = &rest[..end];
            if target.contains("://") || target.starts_with("mailto:") || target.contains(char::is_whitespace) {
                continue;
            }
            let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
            let linked = if path.is_empty() { file.clone() } else { file.parent().unwrap().join(path) };
            if !linked.exists() {
                broken.push(format!("{}: {target} (no such file)", file.display()));
            } else if !fragment.is_empty()
                && linked.extension().is_some_and(|e| e == "md")
                && !anchors(&std::fs::read_to_string(&linked).unwrap()).iter().any(|a| a == fragment)
            {
                broken.push(format!("{}: {target} (no such heading)", file.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}
