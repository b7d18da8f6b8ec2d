//! Policy loading: golden diagnostics for broken files, and the load-level rules around them.
//!
//! Every `tests/fixtures/policies/bad/NAME.toml` is loaded on its own (shown as `NAME.toml`) and must be
//! rejected with exactly the diagnostics in `NAME.expected`, one `Display`ed diagnostic a line.
//! `CORDON_BLESS=1 cargo test -p cordon-core --test suite policy` rewrites the `.expected` files;
//! read every rewritten line before committing it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use cordon_core::policy::{Availability, Diagnostic, Host, LoadError, PolicySet, Severity, load_dir, load_sources};

/// A non-root daemon on a kernel with every landlock feature cordon uses (ABI 6), so availability
/// depends only on what each test varies.
static HOST: std::sync::LazyLock<Host> = std::sync::LazyLock::new(|| Host::new(false, 6));

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("fixtures").join("policies").join("bad")
}

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("policies").join("examples")
}

/// Loads one policy text as if it were the file `name`.
fn load(name: &str, text: &str) -> Result<PolicySet, LoadError> {
    load_sources(&[(PathBuf::from(name), text.to_string())], &HOST)
}

/// Loads a text that must be accepted.
#[track_caller]
fn load_ok(name: &str, text: &str) -> PolicySet {
    match load(name, text) {
        Ok(set) => set,
        Err(e) => panic!("expected {name} to load, got:\n{e}"),
    }
}

fn render(diagnostics: &[Diagnostic]) -> String {
    diagnostics.iter().map(|d| format!("{d}\n")).collect()
}

/// A line diff (longest common subsequence): `-` expected only, `+` actual only, ` ` both.
fn diff(expected: &str, actual: &str) -> String {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = actual.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            let _ = writeln!(out, "   {}", a[i]);
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            let _ = writeln!(out, " - {}", a[i]);
            i += 1;
        } else {
            let _ = writeln!(out, " + {}", b[j]);
            j += 1;
        }
    }
    out
}

/// The `.toml` fixtures, sorted by name.
fn fixture_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(fixtures_dir())
        .expect("fixtures/policies/bad")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    files
}

#[test]
fn bad_policies_report_exactly_the_expected_diagnostics() {
    let bless = std::env::var_os("CORDON_BLESS").is_some_and(|v| v == "1");
    let files = fixture_files();
    assert!(files.len() >= 25, "expected the full fixture set, found {} files", files.len());
    let mut failures = Vec::new();
    for file in &files {
        let name = file.file_name().and_then(|n| n.to_str()).expect("UTF-8 file name").to_string();
        let text = std::fs::read_to_string(file).expect("read fixture");
        let actual = match load(&name, &text) {
            Err(e) => {
                if !e.diagnostics.iter().any(Diagnostic::is_error) {
                    failures.push(format!("{name}: rejected without any error:\n{}", render(&e.diagnostics)));
                }
                // Independent of the golden text: a file's diagnostics come in file order.
                if !e.diagnostics.is_sorted_by_key(|d| (d.line, d.column)) {
                    failures.push(format!("{name}: diagnostics are not in file order:\n{}", render(&e.diagnostics)));
                }
                render(&e.diagnostics)
            }
            Ok(set) => {
                failures.push(format!("{name}: loaded successfully, but every fixture in bad/ must be rejected"));
                render(&set.diagnostics)
            }
        };
        let expected_path = file.with_extension("expected");
        if bless {
            std::fs::write(&expected_path, &actual).expect("write .expected");
            continue;
        }
        match std::fs::read_to_string(&expected_path) {
            Ok(expected) if expected == actual => {}
            Ok(expected) => failures.push(format!(
                "{name}: diagnostics differ from {} (- expected, + actual):\n{}",
                expected_path.display(),
                diff(&expected, &actual)
            )),
            Err(e) => failures
                .push(format!("{name}: cannot read {} ({e}); actual diagnostics:\n{actual}", expected_path.display())),
        }
    }
    // An .expected file without its .toml is a fixture someone forgot to delete.
    for entry in std::fs::read_dir(fixtures_dir()).expect("fixtures dir") {
        let path = entry.expect("dir entry").path();
        if path.extension().is_some_and(|x| x == "expected") && !path.with_extension("toml").exists() {
            failures.push(format!("{}: no matching .toml fixture", path.display()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} policy fixture(s) failed (run with CORDON_BLESS=1 to rewrite, then review every line):\n\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

#[test]
fn the_diagnostic_diff_marks_missing_and_extra_lines() {
    assert_eq!(diff("a\nb\nc\n", "a\nc\nd\n"), "   a\n - b\n   c\n + d\n");
    assert_eq!(diff("x\ny\n", "x\nz\n"), "   x\n - y\n + z\n");
    assert_eq!(diff("", ""), "");
}

#[test]
fn a_file_with_several_errors_lists_every_one() {
    let text = std::fs::read_to_string(fixtures_dir().join("several-errors.toml")).unwrap();
    let err = load("several-errors.toml", &text).unwrap_err();
    let errors: Vec<&Diagnostic> = err.diagnostics.iter().filter(|d| d.is_error()).collect();
    // One per mistake in the file, each at its own position, and no tool survives.
    for needle in [
        "duration \"90\" needs a unit",
        "unknown key \"descripton\" in [defaults]",
        "invalid tool name \"Deploy\"",
        "command[0] \"./deploy.sh\" is a relative path",
        "working_dir \"site\" is relative",
        "`description` must not be empty",
        "env key \"LD_LIBRARY_PATH\" is forbidden",
        "invalid size \"lots\"",
        "invalid confirm \"yes\"",
        "invalid danger \"extreme\"",
        "`min_length` is greater than `max_length`",
        "default fails its own param's rules",
    ] {
        assert!(
            errors.iter().any(|d| d.message.contains(needle)),
            "no error containing {needle:?} in:\n{}",
            render(&err.diagnostics)
        );
    }
    let mut positions: Vec<(u32, u32)> = errors.iter().map(|d| (d.line, d.column)).collect();
    positions.dedup();
    assert!(positions.len() >= 11, "errors should point at distinct places:\n{}", render(&err.diagnostics));
    // Listed in file order (by line, then column), whatever order the loader found them in.
    assert!(positions.is_sorted(), "diagnostics should be in file order:\n{}", render(&err.diagnostics));
    let all: Vec<(u32, u32)> = err.diagnostics.iter().map(|d| (d.line, d.column)).collect();
    assert!(all.is_sorted(), "warnings too should be in file order:\n{}", render(&err.diagnostics));
    // The failure's Display lists every line and the count.
    let shown = err.to_string();
    assert!(shown.ends_with(&format!("policy rejected: {} error(s)", errors.len())), "{shown}");
    for d in &err.diagnostics {
        assert!(shown.contains(&d.to_string()), "{shown}");
    }
}

const GREET: &str = r#"version = 1

[tools.greet]
description = "Greet someone"
reason = "people like to be greeted"
command = ["echo", "hello"]
"#;

#[test]
fn a_tool_name_defined_twice_across_files_names_the_first_definition() {
    let err = load_sources(
        &[(PathBuf::from("a.toml"), GREET.to_string()), (PathBuf::from("b.toml"), format!("# second\n{GREET}"))],
        &HOST,
    )
    .unwrap_err();
    assert_eq!(
        render(&err.diagnostics),
        "b.toml:4:8: duplicate tool name \"greet\": already defined at a.toml:3\n",
        "the duplicate is reported in the second file and names where the first one is"
    );
    // The same name twice in one file is a TOML error already.
    let err = load("c.toml", &format!("{GREET}\n[tools.greet]\ndescription = \"again\"\n")).unwrap_err();
    assert!(err.diagnostics.iter().all(Diagnostic::is_error));
    assert!(render(&err.diagnostics).starts_with("c.toml:8:"), "{}", render(&err.diagnostics));
}

#[test]
fn an_unused_param_is_a_warning_not_an_error() {
    let set = load_ok(
        "unused.toml",
        r#"version = 1

[tools.greet]
description = "Greet someone"
reason = "people like to be greeted"
command = ["echo", "hello"]

[tools.greet.params.who]
type = "string"
"#,
    );
    assert_eq!(set.tools.len(), 1);
    assert_eq!(set.tools[0].params.len(), 1);
    assert_eq!(
        render(&set.diagnostics),
        "unused.toml:3:8: warning: param \"who\" of tool \"greet\" is defined but not used in `command` \
         (and no args_env_prefix is set)\n"
    );
    assert!(set.diagnostics.iter().all(|d| d.severity == Severity::Warning));

    // With args_env_prefix the param reaches the tool through the environment: no warning.
    let set = load_ok(
        "env.toml",
        r#"version = 1

[tools.greet]
description = "Greet someone"
reason = "people like to be greeted"
command = ["echo", "hello"]
args_env_prefix = "GREET_"

[tools.greet.params.who]
type = "string"
"#,
    );
    assert!(set.diagnostics.is_empty(), "{}", render(&set.diagnostics));
}

#[test]
fn a_missing_reason_is_a_warning_not_an_error() {
    let set = load_ok("noreason.toml", "version = 1\n[tools.t]\ndescription = \"d\"\ncommand = [\"true\"]\n");
    assert_eq!(
        render(&set.diagnostics),
        "noreason.toml:2:8: warning: [tools.t] has no `reason`; say why agents may run it\n"
    );
}

#[test]
fn every_example_policy_loads_cleanly_and_every_tool_has_a_reason() {
    let dir = examples_dir();
    let set = match load_dir(&dir, &HOST) {
        Ok(set) => set,
        Err(e) => panic!("{} does not load:\n{e}", dir.display()),
    };
    let toml_files = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "toml"))
        .count();
    assert!(toml_files > 0 && set.files.len() == toml_files, "every example file is loaded: {:?}", set.files);
    assert!(set.diagnostics.is_empty(), "examples should not even warn:\n{}", render(&set.diagnostics));
    assert!(!set.tools.is_empty());
    for tool in &set.tools {
        assert!(
            tool.reason.as_deref().is_some_and(|r| !r.trim().is_empty()),
            "example tool {} ({}) has no reason",
            tool.name,
            tool.source
        );
        assert!(!tool.description.trim().is_empty(), "example tool {} has no description", tool.name);
        // The schema each tool advertises is a valid draft 2020-12 schema.
        assert!(
            jsonschema::draft202012::meta::is_valid(&tool.input_schema.value()),
            "{}: {}",
            tool.name,
            tool.input_schema
        );
    }
}

#[test]
fn a_missing_executable_makes_the_tool_unavailable_not_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let gone = dir.path().join("no-such-program");
    let plain = dir.path().join("plain-file");
    std::fs::write(&plain, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&plain, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let text = format!(
        r#"version = 1

[tools.absolute]
description = "A program that does not exist, by path"
reason = "fixture"
command = ["{}"]

[tools.bare]
description = "A program that does not exist, by name"
reason = "fixture"
command = ["cordon-no-such-program-xyz"]

[tools.not-executable]
description = "A file that is not executable"
reason = "fixture"
command = ["{}"]

[tools.present]
description = "A program that exists"
reason = "fixture"
command = ["/bin/sh", "-c", "true"]
"#,
        gone.display(),
        plain.display()
    );
    let set = load_ok("avail.toml", &text);
    assert!(set.diagnostics.is_empty(), "{}", render(&set.diagnostics));
    let by_name = |n: &str| set.tools.iter().find(|t| t.name == n).unwrap();
    let reason = |n: &str| match &by_name(n).availability {
        Availability::Unavailable { reason } => reason.clone(),
        other => panic!("{n} should be unavailable, is {other:?}"),
    };
    assert_eq!(reason("absolute"), format!("{}: does not exist", gone.display()));
    assert!(
        reason("bare").contains("\"cordon-no-such-program-xyz\" was not found in /usr/local/sbin:"),
        "{}",
        reason("bare")
    );
    assert_eq!(reason("not-executable"), format!("{} is not an executable file", plain.display()));
    assert_eq!(by_name("present").availability, Availability::Available { executable: PathBuf::from("/bin/sh") });
    assert!(!by_name("absolute").is_available());
    assert!(by_name("present").is_available());
}

#[test]
fn a_missing_working_dir_makes_the_tool_unavailable_not_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("gone");
    let file = dir.path().join("file");
    std::fs::write(&file, "").unwrap();
    let text = format!(
        r#"version = 1

[tools.missing]
description = "Runs in a directory that does not exist"
reason = "fixture"
command = ["true"]
working_dir = "{}"

[tools.file]
description = "Runs in a file"
reason = "fixture"
command = ["true"]
working_dir = "{}"

[tools.exists]
description = "Runs in a directory that exists"
reason = "fixture"
command = ["true"]
working_dir = "{}"
"#,
        missing.display(),
        file.display(),
        dir.path().display()
    );
    let set = load_ok("wd.toml", &text);
    let by_name = |n: &str| set.tools.iter().find(|t| t.name == n).unwrap();
    assert_eq!(
        by_name("missing").availability,
        Availability::Unavailable { reason: format!("working_dir {}: does not exist", missing.display()) }
    );
    assert_eq!(
        by_name("file").availability,
        Availability::Unavailable { reason: format!("working_dir {} is not a directory", file.display()) }
    );
    assert!(by_name("exists").is_available(), "{:?}", by_name("exists").availability);
    assert_eq!(by_name("exists").working_dir.as_deref(), Some(dir.path()));
}

#[test]
fn a_broken_file_rejects_the_whole_load_even_when_another_file_is_fine() {
    let err = load_sources(
        &[
            (PathBuf::from("good.toml"), GREET.to_string()),
            (PathBuf::from("bad.toml"), "version = 1\n[tools.x]\ncommand = []\n".to_string()),
        ],
        &HOST,
    )
    .unwrap_err();
    let shown = render(&err.diagnostics);
    assert!(shown.contains("bad.toml:2:8: [tools.x] is missing `description`"), "{shown}");
    assert!(shown.contains("bad.toml:3:11: `command` is empty"), "{shown}");
    assert!(!shown.contains("good.toml"), "{shown}");
}

/// An element with an undefined placeholder does not hide a bad `command[0]`: every problem of a
/// command is listed at once, in column order.
#[test]
fn an_undefined_placeholder_does_not_hide_a_bad_program() {
    let cases = [
        (
            r#"["./deploy.sh", "{{target}}"]"#,
            "mask.toml:6:12: command[0] \"./deploy.sh\" is a relative path; use an absolute path or a bare name looked up in PATH\n\
             mask.toml:6:27: placeholder {{target}} in command[1] has no param; define it under [tools.deploy.params.target]\n",
        ),
        (
            r#"["", "{{target}}"]"#,
            "mask.toml:6:12: command[0] is empty; name the program to run\n\
             mask.toml:6:16: placeholder {{target}} in command[1] has no param; define it under [tools.deploy.params.target]\n",
        ),
        // Both problems of command[0] itself, at one position, in the order they were found.
        (
            r#"["{{prog}}", "{{target}}"]"#,
            "mask.toml:6:12: placeholder {{prog}} in command[0] has no param; define it under [tools.deploy.params.prog]\n\
             mask.toml:6:12: command[0] must be a literal program; placeholders are only allowed in later elements\n\
             mask.toml:6:24: placeholder {{target}} in command[1] has no param; define it under [tools.deploy.params.target]\n",
        ),
    ];
    for (command, expected) in cases {
        let text = format!(
            "version = 1\n\n[tools.deploy]\ndescription = \"Deploy\"\nreason = \"fixture\"\ncommand = {command}\n"
        );
        let err = load("mask.toml", &text).unwrap_err();
        assert_eq!(render(&err.diagnostics), expected, "command = {command}");
    }
}

#[test]
fn the_undefined_placeholder_message_names_the_tool() {
    let text = r#"version = 1

[tools.greet]
description = "Greet"
reason = "fixture"
command = ["echo", "{{who}}"]

[tools.wave]
description = "Wave"
reason = "fixture"
command = ["echo", "{{who}}"]
"#;
    assert_eq!(
        render(&load("names.toml", text).unwrap_err().diagnostics),
        "names.toml:6:20: placeholder {{who}} in command[1] has no param; define it under [tools.greet.params.who]\n\
         names.toml:11:20: placeholder {{who}} in command[1] has no param; define it under [tools.wave.params.who]\n"
    );
}

/// Diagnostics are sorted by line and then column, even when the loader finds them in another
/// order (here: a tool's missing-description error at its header is found after the problems in its
/// params, and a later tool is walked before an earlier param table is checked).
#[test]
fn diagnostics_are_listed_in_file_order() {
    let text = r#"version = 1

[tools.b]
reason = "fixture"
command = ["echo", "{{x}}", "{{y}}"]
timeout = "forever"

[tools.b.params.x]
type = "strin"

[tools.b.params.y]
type = "integer"
min = 5
max = 1
"#;
    let err = load("order.toml", text).unwrap_err();
    let positions: Vec<(u32, u32)> = err.diagnostics.iter().map(|d| (d.line, d.column)).collect();
    assert!(positions.len() >= 4, "{}", render(&err.diagnostics));
    assert!(positions.is_sorted(), "{}", render(&err.diagnostics));
    assert!(render(&err.diagnostics).starts_with("order.toml:3:8: [tools.b] is missing `description`"));
}

/// A swap of two neighbouring letters is one typo, so short keys get suggestions for it too.
#[test]
fn did_you_mean_counts_a_swapped_pair_as_one_edit() {
    let text = r#"version = 1

[tools.t]
description = "d"
reason = "fixture"
command = ["echo", "{{n}}"]
tiemout = "5s"

[tools.t.params.n]
tpye = "string"
"#;
    assert_eq!(
        render(&load("swap.toml", text).unwrap_err().diagnostics),
        "swap.toml:7:1: unknown key \"tiemout\" in [tools.t]; did you mean \"timeout\"?\n\
         swap.toml:9:17: [tools.t.params.n] is missing `type` (string, integer, number, boolean, enum or path)\n\
         swap.toml:10:1: unknown key \"tpye\" in [tools.t.params.n]; did you mean \"type\"?\n"
    );
}

/// Integer `min`/`max` are limited to the safe-integer range the validator and the schema use.
#[test]
fn integer_bounds_outside_the_safe_range_are_load_errors() {
    let text = r#"version = 1

[tools.t]
description = "d"
reason = "fixture"
command = ["echo", "{{a}}", "{{b}}"]

[tools.t.params.a]
type = "integer"
min = -9007199254740992
max = 9007199254740991

[tools.t.params.b]
type = "integer"
min = -9007199254740991
max = 9007199254740992
"#;
    assert_eq!(
        render(&load("bounds.toml", text).unwrap_err().diagnostics),
        "bounds.toml:10:7: `min` -9007199254740992 is outside the safe integer range -9007199254740991..=9007199254740991\n\
         bounds.toml:16:7: `max` 9007199254740992 is outside the safe integer range -9007199254740991..=9007199254740991\n"
    );
}

/// Pattern syntax that only one of the daemon's regex engine and JSON Schema validators reads (or
/// that they read differently) is refused when the policy loads.
#[test]
fn engine_specific_pattern_syntax_is_a_load_error() {
    for pattern in [
        r"(?i)abc",
        r"(?s).*",
        r"(?P<n>x)",
        r"(?<n>x)",
        r"(?=a)a",
        r"\p{L}+",
        r"\Aabc",
        r"abc\z",
        r"\bword",
        r"[[:alpha:]]+",
        r"[\D]",
        r"[a\W]",
        r"[\S]",
        r"\1",
        r"\u0041",
        r"\x4",
        r"[^]a]",
        r"ab\",
    ] {
        let text = format!(
            "version = 1\n[tools.t]\ndescription = \"d\"\nreason = \"r\"\ncommand = [\"echo\", \"{{{{w}}}}\"]\n\
             [tools.t.params.w]\ntype = \"string\"\npattern = '{pattern}'\n"
        );
        let shown = match load("pat.toml", &text) {
            Ok(_) => panic!("pattern {pattern} should be refused"),
            Err(e) => render(&e.diagnostics),
        };
        let prefix = format!("pat.toml:8:11: unsupported pattern {pattern:?}: ");
        assert!(shown.starts_with(&prefix) && shown.lines().count() == 1, "{pattern}:\n{shown}");
    }
    // The portable subset loads: escaped punctuation, \xHH, non-capturing groups, shorthand classes.
    for pattern in [r"a\.b", r"\x41+", r"(?:ab|cd)", r"[\w.-]+", r"\D\W\S", r"[^\n]+", r"\t\n\r\f\v", r"\(\)\[\]"] {
        let text = format!(
            "version = 1\n[tools.t]\ndescription = \"d\"\nreason = \"r\"\ncommand = [\"echo\", \"{{{{w}}}}\"]\n\
             [tools.t.params.w]\ntype = \"string\"\npattern = '{pattern}'\n"
        );
        load_ok("pat.toml", &text);
    }
}

/// `namespace = "proj"` names every tool of the file `proj__NAME`, so two files can each define
/// `run-tests`; the namespace is validated, and the full name must fit in 64 characters.
#[test]
fn a_namespace_prefixes_the_tool_names_of_its_file() {
    let tool = |ns: &str| {
        format!(
            "version = 1\nnamespace = \"{ns}\"\n[tools.run-tests]\ndescription = \"d\"\nreason = \"r\"\ncommand = [\"/bin/true\"]\n"
        )
    };
    let sources = [(PathBuf::from("a.toml"), tool("web")), (PathBuf::from("b.toml"), tool("api"))];
    let set = load_sources(&sources, &HOST).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = set.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["api__run-tests", "web__run-tests"]);
    // The same namespace twice is a duplicate, named in full.
    let twice = [(PathBuf::from("a.toml"), tool("web")), (PathBuf::from("b.toml"), tool("web"))];
    let e = load_sources(&twice, &HOST).expect_err("duplicate");
    assert!(
        render(&e.diagnostics).contains("duplicate tool name \"web__run-tests\": already defined at a.toml:3"),
        "{e}"
    );
    for bad in ["Web", "web_app", "1web", "", "web__x"] {
        let e = load("ns.toml", &tool(bad)).expect_err(bad);
        let text = render(&e.diagnostics);
        assert!(text.contains(&format!("invalid namespace {bad:?}: a namespace matches ^[a-z][a-z0-9-]*$")), "{text}");
    }
    let long = format!(
        "version = 1\nnamespace = \"{}\"\n[tools.{}]\ndescription = \"d\"\ncommand = [\"/bin/true\"]\n",
        "n".repeat(32),
        "t".repeat(40)
    );
    let e = load("long.toml", &long).expect_err("too long");
    assert!(render(&e.diagnostics).contains("is longer than 64 characters; shorten the namespace or the name"), "{e}");
}

/// The reason `cordon import` writes ("TODO: ...") is an error until an admin replaces it.
#[test]
fn a_placeholder_reason_is_an_error_that_says_what_to_do() {
    let text = "version = 1\n[tools.t]\ndescription = \"d\"\nreason = \"TODO: say why\"\ncommand = [\"/bin/true\"]\n";
    let e = load("t.toml", text).expect_err("placeholder");
    assert_eq!(
        render(&e.diagnostics),
        "t.toml:4:10: [tools.t] `reason` is still a placeholder (\"TODO: say why\"); review the tool, then write why \
         agents may run it (a reason starting with \"TODO\" is not accepted)\n"
    );
    load_ok("t.toml", &text.replace("TODO: say why", "agents list files"));
}

/// A CtxNest or Gandalf JSON file in a policy directory is named with the `cordon import` command
/// that converts it; other non-TOML files get the generic message. Checked directly, a JSON file
/// is an error with the same hint instead of "invalid TOML".
#[test]
fn json_configs_in_a_policy_directory_say_how_to_import_them() {
    use cordon_core::policy::{Trust, read_dir_sources, read_path_sources};
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::write(p.join("ctxnest.json"), r#"{"version": "1", "tools": {}}"#).unwrap();
    std::fs::write(p.join("registry.json"), r#"{"spells": {}}"#).unwrap();
    std::fs::write(p.join("notes.txt"), "hello").unwrap();
    let read = read_dir_sources(p, Trust::current());
    assert!(read.files.is_empty());
    let text = render(&read.diagnostics);
    let shown = |n: &str| p.join(n).display().to_string();
    assert!(
        text.contains(&format!(
            "warning: ignored: {} looks like a CtxNest config (ctxnest.json), which cordond does not read: convert it \
         with `cordon import ctxnest {} -o {}`",
            shown("ctxnest.json"),
            shown("ctxnest.json"),
            shown("ctxnest.toml")
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("`cordon import gandalf {} -o {}`", shown("registry.json"), shown("registry.toml"))),
        "{text}"
    );
    assert!(text.contains(&format!("ignored: {} does not end in .toml", shown("notes.txt"))), "{text}");
    assert!(read.diagnostics.iter().all(|d| !d.is_error()), "{text}");

    let direct = read_path_sources(&p.join("registry.json"), Trust::current());
    assert!(direct.files.is_empty());
    assert_eq!(direct.diagnostics.len(), 1);
    assert!(direct.diagnostics[0].is_error());
    assert!(direct.diagnostics[0].message.contains("looks like a Gandalf spell registry"), "{:?}", direct.diagnostics);
    std::fs::write(p.join("other.json"), "[1, 2]").unwrap();
    let direct = read_path_sources(&p.join("other.json"), Trust::current());
    assert!(
        direct.diagnostics[0].message.contains("cordond reads only TOML files named *.toml"),
        "{:?}",
        direct.diagnostics
    );
}

#[test]
fn hosts_load_with_their_bounds_set_the_proxy_environment_and_need_a_network_namespace() {
    use cordon_core::egress::{DEFAULT_MAX_BYTES, PROXY_PORT};
    let text = r#"version = 1
[tools.fetch]
description = "Fetches from two APIs"
reason = "fixture"
command = ["/bin/true"]
env = { LANG = "C" }
network = { hosts = ["api.github.com:443", "*.pypi.org:443", "10.0.0.0/8:8080"], max_connections = 4 }
"#;
    let set = load_ok("hosts.toml", text);
    assert!(set.diagnostics.iter().all(|d| d.severity == Severity::Warning), "{}", render(&set.diagnostics));
    let tool = &set.tools[0];
    let egress = tool.sandbox.network.egress().expect("hosts parsed");
    let shown: Vec<String> = egress.hosts.iter().map(ToString::to_string).collect();
    assert_eq!(shown, ["api.github.com:443", "*.pypi.org:443", "10.0.0.0/8:8080"]);
    assert_eq!((egress.max_connections, egress.max_bytes), (4, DEFAULT_MAX_BYTES));
    assert!(matches!(tool.availability, Availability::Available { .. }), "{:?}", tool.availability);

    let account = cordon_core::argv::Account { user: "u".into(), home: "/h".into(), gid: None };
    let plan = cordon_core::argv::plan(tool, Path::new("/bin/true"), &Default::default(), &account);
    let env = |k: &str| plan.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(env("https_proxy"), Some(format!("http://127.0.0.1:{PROXY_PORT}")));
    assert_eq!(env("HTTP_PROXY"), Some(format!("http://127.0.0.1:{PROXY_PORT}")));
    assert_eq!(env("ALL_PROXY"), Some(format!("socks5h://127.0.0.1:{PROXY_PORT}")));
    assert_eq!(env("no_proxy"), Some(String::new()));

    // A daemon that is not root and cannot make user namespaces cannot give it its own network.
    let mut host = Host::new(false, 6);
    host.netns_unavailable = Some(Host::no_netns("user namespaces are disabled"));
    let set = load_sources(&[(PathBuf::from("hosts.toml"), text.to_string())], &host).expect("loads");
    match &set.tools[0].availability {
        Availability::Unavailable { reason } => {
            assert!(reason.contains("network.hosts needs a network namespace"), "{reason}");
            assert!(reason.contains("user namespaces are disabled"), "{reason}");
        }
        other => panic!("expected unavailable, got {other:?}"),
    }
}

#[test]
fn host_tables_carry_request_rules_and_an_upstream_ca_that_must_be_roots() {
    use cordon_core::egress::{READ_ONLY_METHODS, RequestRules};
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = dir.path().join("internal.pem");
    std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").expect("write ca");
    let text = format!(
        r#"version = 1
[tools.gh]
description = "Reads one organisation's repositories"
reason = "fixture"
command = ["/bin/true"]
network = {{ hosts = [
  "a.example:443",
  {{ host = "api.github.com:443", methods = ["GET", "HEAD"], paths = ["/repos/ORG/"], upstream_ca = "{}" }},
  {{ host = "plain.example:80", read_only = true }},
  {{ host = "ca-only.example:443", upstream_ca = "{}" }},
] }}
"#,
        ca.display(),
        ca.display()
    );
    let set = load_ok("tables.toml", &text);
    let tool = &set.tools[0];
    let egress = tool.sandbox.network.egress().expect("hosts parsed");
    let shown: Vec<String> = egress.hosts.iter().map(ToString::to_string).collect();
    assert_eq!(shown, ["a.example:443", "api.github.com:443", "plain.example:80", "ca-only.example:443"]);
    let http: Vec<(String, Option<RequestRules>, bool)> =
        egress.http.iter().map(|h| (h.rule.to_string(), h.requests.clone(), h.upstream_ca.is_some())).collect();
    let methods = |m: &[&str]| m.iter().map(|s| (*s).to_string()).collect::<Vec<_>>();
    assert_eq!(
        http,
        [
            (
                "api.github.com:443".to_string(),
                Some(RequestRules { methods: methods(&["GET", "HEAD"]), paths: vec!["/repos/ORG/".into()] }),
                true
            ),
            (
                "plain.example:80".to_string(),
                Some(RequestRules { methods: methods(READ_ONLY_METHODS), paths: vec![] }),
                false
            ),
            ("ca-only.example:443".to_string(), None, true),
        ]
    );
    // Rules on an HTTPS port: the proxy terminates TLS there, and the lint says what that asks.
    let lint: Vec<&Diagnostic> = set.diagnostics.iter().filter(|d| d.message.contains("[tls-termination")).collect();
    assert_eq!(lint.len(), 1, "{}", render(&set.diagnostics));
    assert!(lint[0].message.contains("api.github.com:443") && lint[0].message.contains("SSL_CERT_FILE"));
    assert!(!lint[0].message.contains("ca-only"), "no rules there: {}", lint[0].message);
    let accepted = text.replace("command = [", "accept_warnings = [\"tls-termination\"]\ncommand = [");
    let set = load_ok("tables.toml", &accepted);
    assert!(!set.diagnostics.iter().any(|d| d.message.contains("tls-termination")));

    // A CA only root can change makes the tool available; anything else says why not.
    // not a skip: a root and a non-root run each assert their own outcome below.
    let root = nix::unistd::geteuid().is_root();
    match (&tool.availability, root) {
        (Availability::Available { .. }, true) => {}
        (Availability::Unavailable { reason }, false) => assert!(reason.contains("owned by uid"), "{reason}"),
        (other, _) => panic!("root {root}: {other:?}"),
    }
    std::fs::remove_file(&ca).expect("remove ca");
    let set = load_ok("tables.toml", &text);
    match &set.tools[0].availability {
        Availability::Unavailable { reason } => {
            assert!(reason.starts_with("network.hosts api.github.com:443: upstream_ca"), "{reason}");
            assert!(reason.contains("does not exist"), "{reason}");
        }
        other => panic!("expected unavailable, got {other:?}"),
    }
    if root {
        use std::os::unix::fs::PermissionsExt;
        // Checked again at each call: a CA that someone else can change after the load makes
        // the loaded tool unavailable too.
        std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\n").expect("write ca");
        let loaded = load_ok("tables.toml", &text);
        assert!(loaded.tools[0].is_available(), "{:?}", loaded.tools[0].availability);
        std::fs::set_permissions(&ca, std::fs::Permissions::from_mode(0o646)).expect("chmod");
        match loaded.tools[0].availability_now() {
            Availability::Unavailable { reason } => assert!(reason.contains("writable by its group or others")),
            other => panic!("expected unavailable now, got {other:?}"),
        }
        std::fs::set_permissions(&ca, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        match &load_ok("tables.toml", &text).tools[0].availability {
            Availability::Unavailable { reason } => assert!(reason.contains("writable by its group or others")),
            other => panic!("expected unavailable, got {other:?}"),
        }
    }
}
