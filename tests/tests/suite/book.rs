//! The documentation book (docs/, mdbook; docs/SUMMARY.md orders its pages) is checked against
//! the code, so that it cannot drift:
//! - the generated reference pages (docs/reference/) are exactly what `cordon man --reference`
//!   writes from the code;
//! - every fenced block of every page (and of the README) is accounted for: each policy block
//!   passes the real `cordon policy check` (a fragment gets `version = 1`, or the page's earlier
//!   block that defines its tool); each `cordon ...` line parses against the real command line
//!   (clap, in process) and each `cordond ...` line against cordond's (`ARGS --help`), and a
//!   transcript of a refused one must be refused as shown; the sections whose blocks a runner
//!   executes as written are listed in [`EXECUTED`] with their runner; a line tests/run or
//!   test-deb.sh runs literally counts as run; every other block is marked in the markdown, with
//!   the reason (`<!-- not run: REASON -->` on the line before it), or is output (```text,
//!   ```json, a block without a language). The test prints the counts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Parser as _;
use clap::error::ErrorKind;
use cordon_tests::bin;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_reference_pages_are_what_the_binary_writes() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(bin("cordon")).args(["man", "--reference"]).arg(dir.path()).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let names = |d: &Path| -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    };
    let committed = root().join("docs/reference");
    let regenerate = "regenerate them with `cargo build -p cordon-client && target/debug/cordon man --reference \
                      docs/reference` and commit the result";
    assert_eq!(
        names(dir.path()),
        names(&committed),
        "docs/reference/ holds other pages than the binary writes: {regenerate}"
    );
    for name in names(dir.path()) {
        let fresh = read(&dir.path().join(&name));
        let old = read(&committed.join(&name));
        assert!(fresh == old, "docs/reference/{name} differs from what the code generates: {regenerate}");
    }
    // The command needs a directory: a usage error that says which flags, not a panic.
    let out = Command::new(bin("cordon")).args(["man"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// The pages (or the `## ` section of a page) whose blocks a runner executes as written, reading
/// them from the page (not a copy), with the runner: the runner file must name the page.
const EXECUTED: &[(&str, Option<&str>, &str, &str)] = &[
    ("README.md", Some("Quick start"), ".ci/quickstart", "the quick start (daemon, commands, the test command)"),
    (
        "docs/getting-started.md",
        None,
        "packaging/test-deb.sh",
        "the admin runbook (with tests/run; readme.rs checks every line)",
    ),
    ("docs/getting-started.md", None, "tests/tests/suite/readme.rs", "every runbook command is one CI runs"),
    (
        "docs/toolchains.md",
        Some("Running real toolchains"),
        "tests/tests/suite/readme_toolchains.rs",
        "the Rust, Python, Node, C and git examples",
    ),
    ("docs/remote.md", Some("Remote daemons (mutual TLS)"), "tests/tests/suite/remote.rs", "the openssl lines"),
];

/// One fenced block.
#[derive(Debug)]
struct Block {
    page: String,
    line: usize,
    lang: String,
    /// The `## ` section it is in.
    section: String,
    body: String,
    /// The reason of a `<!-- not run: REASON -->` marker on the line before the fence.
    not_run: Option<String>,
}

/// The book's pages in SUMMARY.md's order, and the README.
fn pages() -> Vec<String> {
    let summary = read(&root().join("docs/SUMMARY.md"));
    let mut pages = vec!["README.md".to_string()];
    for (i, _) in summary.match_indices("](") {
        let rest = &summary[i + 2..];
        let end = rest.find(')').unwrap();
        pages.push(format!("docs/{}", &rest[..end]));
    }
    pages
}

fn blocks(page: &str) -> Vec<Block> {
    let text = read(&root().join(page));
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut section = String::new();
    let mut i = 0;
    while i < lines.len() {
        if let Some(heading) = lines[i].strip_prefix("## ") {
            section = heading.trim().to_string();
        }
        let Some(info) = lines[i].trim_start().strip_prefix("```") else {
            i += 1;
            continue;
        };
        let lang = info.split([',', ' ']).next().unwrap_or("").to_string();
        let not_run = (i > 0)
            .then(|| lines[i - 1].trim())
            .and_then(|l| l.strip_prefix("<!-- not run:"))
            .and_then(|l| l.strip_suffix("-->"))
            .map(|r| r.trim().to_string());
        let start = i;
        let mut body = String::new();
        i += 1;
        while i < lines.len() && !lines[i].trim_start().starts_with("```") {
            body.push_str(lines[i].trim_start_matches("   "));
            body.push('\n');
            i += 1;
        }
        assert!(i < lines.len(), "{page}:{}: a code block that never closes", start + 1);
        out.push(Block { page: page.to_string(), line: start + 1, lang, section: section.clone(), body, not_run });
        i += 1;
    }
    out
}

/// Shell words of one command line, up to the first pipe, redirection, `;`, `&&` or `||`, with
/// quotes removed (the command line as the program receives it).
fn shell_words(line: &str) -> Vec<String> {
    let (mut words, mut word, mut in_word) = (Vec::new(), String::new(), false);
    let mut chars = line.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') => {
                if let Some(n) = chars.next() {
                    word.push(n);
                }
            }
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '\\') => {
                if let Some(n) = chars.next() {
                    word.push(n);
                    in_word = true;
                }
            }
            (None, '|' | ';' | '>' | '<' | '&') => break,
            (None, '#') if !in_word => break,
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The arguments of a `cordon` command on this line (after a prompt, `sudo`, `VAR=value`
/// assignments), or None when the line runs something else.
fn cordon_args(line: &str) -> Option<Vec<String>> {
    program_args(line).filter(|(p, _)| p == "cordon").map(|(_, a)| a)
}

/// The program (its file name) a command line runs and its arguments.
fn program_args(line: &str) -> Option<(String, Vec<String>)> {
    let line = line.trim();
    let line = line.strip_prefix("$ ").or_else(|| line.strip_prefix("# ")).unwrap_or(line);
    let mut words = shell_words(line).into_iter().peekable();
    while let Some(w) = words.peek() {
        if w == "sudo" || w == "-E" || (w.contains('=') && !w.starts_with('-')) {
            words.next();
        } else {
            break;
        }
    }
    let program = words.next()?;
    let name = program.rsplit('/').next().unwrap_or(&program).to_string();
    Some((name, words.collect()))
}

/// Whether cordond accepts these arguments, without running it: clap parses every argument
/// (values included) before it acts on a trailing `--help`.
fn cordond_parses(args: &[String]) -> Result<(), String> {
    let out = Command::new(bin("cordond")).args(args).arg("--help").output().unwrap();
    if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) }
}

/// A policy block as a whole file: a fragment without `version` gets the line it lacks.
fn as_policy_file(body: &str) -> String {
    if body.lines().any(|l| l.trim_start().starts_with("version")) {
        body.to_string()
    } else {
        format!("version = 1\n{body}")
    }
}

/// The tools a block defines (`[tools.NAME]`).
fn tools_defined(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|l| l.trim().strip_prefix("[tools.")?.strip_suffix(']').map(str::to_string))
        .filter(|name| !name.contains('.'))
        .collect()
}

/// The tools a block adds tables to (`[tools.NAME.params.X]`, `[[tools.NAME.examples]]`) without
/// defining them.
fn fragment_of(body: &str) -> Vec<String> {
    let defined = tools_defined(body);
    let mut out: Vec<String> = body
        .lines()
        .filter_map(|l| {
            let l = l.trim().trim_start_matches('[');
            let rest = l.strip_prefix("tools.")?;
            let (name, sub) = rest.split_once('.')?;
            (!sub.is_empty()).then(|| name.to_string())
        })
        .filter(|n| !defined.contains(n))
        .collect();
    out.dedup();
    out
}

fn is_policy(body: &str) -> bool {
    body.lines().any(|l| {
        let l = l.trim_start();
        l.starts_with("[tools.")
            || l.starts_with("[[tools.")
            || l.starts_with("[workflows.")
            || l.starts_with("[servers.")
            || l.starts_with("[defaults")
    })
}

#[test]
fn every_block_of_the_book_is_checked_run_or_marked() {
    let root = root();
    for (page, _, runner, _) in EXECUTED {
        let text = read(&root.join(runner));
        assert!(text.contains(page), "{runner} is listed as running {page}'s blocks but does not read {page}");
    }
    // Command lines the CI scripts run literally (`run COMMAND` in test-deb.sh; as root, so a
    // page's `sudo X` is X there).
    let ci_lines: Vec<String> = ["tests/run", "packaging/test-deb.sh"]
        .iter()
        .flat_map(|f| {
            read(&root.join(f)).lines().map(|l| l.trim().trim_start_matches("run ").to_string()).collect::<Vec<_>>()
        })
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let run_by_ci = |line: &str| {
        let line = line.split(" #").next().unwrap_or(line).trim();
        let line = line.strip_prefix("sudo ").unwrap_or(line);
        ci_lines.iter().any(|l| l == line)
    };
    // `cordon mcp config` is the agent-wiring command (docs/agents.md); its lines are checked
    // once the command exists in this build.
    let cli = <cordon_client::Cli as clap::CommandFactory>::command();
    let has_mcp_config = cli.find_subcommand("mcp").and_then(|m| m.find_subcommand("config")).is_some();
    let dir = tempfile::tempdir().unwrap();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut policies = 0;
    for page in pages() {
        // `[tools.NAME]` -> the block of this page that defines it.
        let mut defined: BTreeMap<String, String> = BTreeMap::new();
        for b in blocks(&page) {
            let executed =
                EXECUTED.iter().any(|(p, section, _, _)| *p == page && section.is_none_or(|s| s == b.section));
            let at = format!("{}:{}", b.page, b.line);
            *counts.entry("blocks").or_default() += 1;
            if let Some(reason) = &b.not_run {
                assert!(reason.len() >= 10, "{at}: say why the block is not run, in the marker");
                *counts.entry("marked not run").or_default() += 1;
                continue;
            }
            match b.lang.as_str() {
                "toml" => {
                    if !is_policy(&b.body) && executed {
                        // An excerpt of a file the page's runner writes and compares (toolchains).
                        *counts.entry("toml excerpts a runner compares").or_default() += 1;
                        continue;
                    }
                    if !is_policy(&b.body) {
                        failures.push(format!(
                            "{at}: a toml block that is no policy: mark it <!-- not run: REASON --> or make it a policy"
                        ));
                        continue;
                    }
                    policies += 1;
                    let file = dir.path().join(format!("block-{policies}.toml"));
                    // A fragment that adds to a tool of an earlier block of the page (its examples,
                    // say) is checked together with that block.
                    let mut text = as_policy_file(&b.body);
                    for tool in fragment_of(&b.body) {
                        if let Some(base) = defined.get(&tool) {
                            text = format!("{}\n{}", as_policy_file(base), b.body);
                            *counts.entry("policy fragments checked with the page's tool they add to").or_default() +=
                                1;
                        }
                    }
                    for tool in tools_defined(&b.body) {
                        defined.insert(tool, b.body.clone());
                    }
                    std::fs::write(&file, text).unwrap();
                    let out = Command::new(bin("cordon")).args(["policy", "check"]).arg(&file).output().unwrap();
                    if out.status.success() {
                        *counts.entry("policies that pass `cordon policy check`").or_default() += 1;
                    } else {
                        failures.push(format!(
                            "{at}: `cordon policy check` refuses this policy block:\n{}{}",
                            String::from_utf8_lossy(&out.stdout),
                            String::from_utf8_lossy(&out.stderr)
                        ));
                    }
                }
                "sh" | "bash" | "shell" | "console" | "" | "text" => {
                    let shell = matches!(b.lang.as_str(), "sh" | "bash" | "shell");
                    let mut other = Vec::new();
                    let mut joined = String::new();
                    let lines: Vec<&str> = b.body.lines().collect();
                    for (i, raw) in lines.iter().enumerate() {
                        // A line continued with `\` is one command.
                        if let Some(head) = raw.strip_suffix('\\') {
                            joined.push_str(head);
                            joined.push(' ');
                            continue;
                        }
                        let line = std::mem::take(&mut joined) + raw;
                        let trimmed = line.trim();
                        // In an output block only a prompt line (`$ cordon ...`) is a command.
                        if !shell && !trimmed.starts_with("$ ") {
                            continue;
                        }
                        if trimmed.is_empty() || (shell && trimmed.starts_with('#')) {
                            continue;
                        }
                        let Some((program, args)) = program_args(trimmed) else { continue };
                        let parsed = match program.as_str() {
                            "cordond" => cordond_parses(&args),
                            "cordon" => {
                                if !has_mcp_config
                                    && args.first().is_some_and(|a| a == "mcp")
                                    && args.get(1).is_some_and(|a| a == "config")
                                {
                                    *counts.entry("cordon mcp config lines (not in this build)").or_default() += 1;
                                    continue;
                                }
                                let argv = std::iter::once("cordon".to_string()).chain(args);
                                match cordon_client::Cli::try_parse_from(argv) {
                                    Ok(_) => Ok(()),
                                    Err(e)
                                        if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) =>
                                    {
                                        Ok(())
                                    }
                                    Err(e) => Err(e.to_string()),
                                }
                            }
                            _ if shell && run_by_ci(trimmed) => {
                                *counts
                                    .entry("other command lines tests/run or test-deb.sh runs as written")
                                    .or_default() += 1;
                                continue;
                            }
                            _ => {
                                other.push(trimmed.to_string());
                                continue;
                            }
                        };
                        // A transcript of a refused command line: `$ COMMAND`, then clap's `error: ...`.
                        let refusal = lines
                            .get(i + 1)
                            .and_then(|l| l.trim().strip_prefix("error: "))
                            .filter(|_| !shell)
                            .map(|l| l.trim_end_matches("...").trim_end().to_string());
                        match (parsed, refusal) {
                            (Ok(()), None) => {
                                *counts.entry("command lines that parse (cordon, cordond)").or_default() += 1
                            }
                            (Err(e), Some(shown)) if e.contains(&shown) => {
                                *counts.entry("refused command lines, refused as shown").or_default() += 1
                            }
                            (Ok(()), Some(_)) => {
                                failures.push(format!("{at}: `{trimmed}` is shown refused, but it parses"))
                            }
                            (Err(e), _) => failures.push(format!("{at}: `{trimmed}` does not parse as shown:\n{e}")),
                        }
                    }
                    if !shell && !b.body.lines().any(|l| l.trim().starts_with("$ ")) {
                        *counts.entry("output and synopsis blocks (text, no command)").or_default() += 1;
                    }
                    if shell && !other.is_empty() {
                        if executed {
                            *counts.entry("shell blocks a runner executes").or_default() += 1;
                        } else {
                            failures.push(format!(
                                "{at}: commands CI neither runs nor checks: {other:?}; run them (and list the page in \
                                 EXECUTED), or mark the block <!-- not run: REASON -->"
                            ));
                        }
                    }
                }
                "json" | "yaml" | "ini" | "python" | "proto" | "rust" => {
                    *counts.entry("data and code blocks (json, yaml, ...): output or examples").or_default() += 1;
                }
                other => failures.push(format!("{at}: a ```{other} block: use a language this test knows")),
            }
        }
    }
    let report: Vec<String> = counts.iter().map(|(k, v)| format!("{v:>4} {k}")).collect();
    println!("the book's blocks:\n{}", report.join("\n"));
    println!("executed as written by their runners:");
    for (page, section, runner, what) in EXECUTED {
        println!("  {page}{}: {runner} ({what})", section.map(|s| format!(" \"## {s}\"")).unwrap_or_default());
    }
    assert!(failures.is_empty(), "{} blocks of the book fail:\n{}", failures.len(), failures.join("\n\n"));
    assert!(counts.get("policies that pass `cordon policy check`").copied().unwrap_or(0) >= 5, "{report:?}");
    assert!(counts.get("command lines that parse (cordon, cordond)").copied().unwrap_or(0) >= 30, "{report:?}");
}

/// The checker itself: a command line that does not parse is caught, and the shell words are
/// those the program gets.
#[test]
fn the_block_checker_reads_command_lines_as_the_shell_does() {
    assert_eq!(
        cordon_args("sudo cordon run t --arg 'pattern=a b' --json | jq . # note"),
        Some(vec!["run".into(), "t".into(), "--arg".into(), "pattern=a b".into(), "--json".into()])
    );
    assert_eq!(cordon_args("$ CORDON_SOCKET=/tmp/s cordon status"), Some(vec!["status".into()]));
    assert_eq!(cordon_args("cargo build"), None);
    assert!(cordond_parses(&["--policies".into(), "/nonexistent".into()]).is_ok());
    assert!(cordond_parses(&["--no-such-flag".into()]).is_err());
    let bad = cordon_args("cordon run --no-such-flag").unwrap();
    assert!(cordon_client::Cli::try_parse_from(std::iter::once("cordon".to_string()).chain(bad)).is_err());
    assert!(is_policy("[tools.x]\ncommand = [\"true\"]\n"));
    assert_eq!(as_policy_file("[tools.x]\n"), "version = 1\n[tools.x]\n");
    assert_eq!(tools_defined("[tools.x]\n[tools.x.params.p]\n"), ["x"]);
    assert_eq!(fragment_of("[[tools.y.examples]]\nargs = {}\n[[tools.y.refuse]]\n"), ["y"]);
    assert!(fragment_of("[tools.x]\n[tools.x.params.p]\n").is_empty());
}

/// CI builds the book (a missing chapter fails it) before the package that installs it, and the
/// package's file list installs every page.
#[test]
fn ci_builds_the_book_before_the_package_and_the_package_installs_it() {
    let run = read(&root().join("tests/run"));
    let book = run.find("\nmdbook build docs\n").expect("tests/run builds the book: mdbook build docs");
    let deb = run.find("\npackaging/build-deb.sh\n").expect("tests/run builds the package");
    assert!(book < deb, "tests/run must build the book before the package (build-deb.sh packs target/book)");
    assert!(
        run.contains("cargo install mdbook --locked --version ") && run.contains("--no-default-features"),
        "mdbook is installed pinned, with the fewest features"
    );
    let config = read(&root().join("docs/book.toml"));
    assert!(config.contains("create-missing = false"), "a chapter that does not exist must fail the build");
    assert!(config.contains("build-dir = \"../target/book\""), "{config}");
    let install = read(&root().join("packaging/install.sh"));
    for needle in ["\"$repo\"/docs/*.md", "docs/reference/*.md", "$target/book/index.html", "$docdir/html/"] {
        assert!(install.contains(needle), "packaging/install.sh no longer installs {needle}");
    }
    let deb_test = read(&root().join("packaging/test-deb.sh"));
    assert!(deb_test.contains("/usr/share/doc/cordon/html/index.html"), "test-deb.sh checks the installed HTML book");
}

/// The maintainers' pages name files of this repository; a file that moved or went away must not
/// stay named there (the shape of the code changes more often than those pages are read).
/// Every `` `path` `` in backticks that starts with a top-level directory of the repository, and
/// every relative link target, must exist (globs and brace lists are skipped; `name.rs:LINE` is
/// checked without the line).
#[test]
fn the_maintainers_pages_name_only_files_that_exist() {
    const PAGES: &[&str] = &["ARCHITECTURE.md", "docs/code-map.md", "docs/sandbox-order.md", "vendor/README.md"];
    const TOP: &[&str] = &[
        "proto/",
        "core/",
        "limit/",
        "daemon/",
        "client/",
        "tests/",
        "packaging/",
        "deploy/",
        "vendor/",
        "fuzz/",
        "docs/",
        "policies/",
        ".ci/",
    ];
    let root = root();
    let mut checked = 0;
    let mut missing = Vec::new();
    for page in PAGES {
        let text = read(&root.join(page));
        let dir = Path::new(page).parent().unwrap_or(Path::new(""));
        let mut names: Vec<(PathBuf, String)> = Vec::new();
        for (i, span) in text.split('`').enumerate() {
            // Odd pieces are inside backticks.
            if i % 2 == 1 && TOP.iter().any(|t| span.starts_with(t)) && !span.contains(char::is_whitespace) {
                names.push((root.clone(), span.to_string()));
            }
        }
        for link in text.split("](").skip(1) {
            let target = link.split(')').next().unwrap_or("");
            let target = target.split('#').next().unwrap_or("");
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            names.push((root.join(dir), target.to_string()));
        }
        for (base, name) in names {
            // Globs, brace lists and placeholders (`docs/PAGE`, `/proc/PID/...`) name no one file.
            let placeholder =
                name.split('/').any(|part| part.len() > 1 && part.bytes().all(|b| b.is_ascii_uppercase()));
            if name.contains(['*', '{', '}', '<', '>', '$']) || placeholder || name.contains("...") {
                continue;
            }
            let name = name.split(':').next().unwrap_or(&name).trim_end_matches(['.', ',']);
            checked += 1;
            if !base.join(name).exists() {
                missing.push(format!("{page}: {name}"));
            }
        }
    }
    eprintln!("{checked} file names checked in {}", PAGES.join(", "));
    assert!(checked > 50, "too few names found ({checked}): is the scan still reading the pages?");
    assert!(missing.is_empty(), "named but not in the repository (moved? update the page):\n{}", missing.join("\n"));
}
