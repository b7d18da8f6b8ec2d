//! Property tests: the policy parser and the argument validator never panic and always answer
//! clearly, whatever they are given. Fixed seed, fixed case budget, no failure files: the same
//! cases run on every machine, in bounded time.

use std::path::PathBuf;

use cordon_core::policy::{Diagnostic, Host, LoadError, PARAM_KEYS, PolicySet, TOOL_KEYS, load_sources};
use cordon_core::validate::{ErrorCode, validate};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use serde_json::Value;

static HOST: std::sync::LazyLock<Host> = std::sync::LazyLock::new(|| Host::new(false, 6));

fn config(cases: u32) -> Config {
    Config { cases, failure_persistence: None, rng_seed: RngSeed::Fixed(0x00c0_4d07), ..Config::default() }
}

/// A policy that loads, the starting point of the near-valid mutations.
const VALID: &str = r#"version = 1

[defaults]
timeout = "30s"
max_output = "64KiB"

[tools.search-text]
description = "Search files for a pattern"
reason = "reading code"
command = ["grep", "-rn", "-e", "{{pattern}}", "--", "{{path}}"]
working_dir = "/srv"
env = { LANG = "C" }
annotations = { title = "Search", read_only = true }
limits = { memory = "256MiB", processes = 8 }

[tools.search-text.params.pattern]
type = "string"
pattern = "[^\\n]+"
max_length = 100
required = true

[tools.search-text.params.path]
type = "path"
default = "."

[tools.count]
description = "Count"
command = ["/bin/echo", "{{n}}", "{{mode}}", "{{flag}}", "{{x}}"]
confirm = "agent"

[tools.count.params.n]
type = "integer"
min = 0
max = 10

[tools.count.params.mode]
type = "enum"
values = ["a", "b"]

[tools.count.params.flag]
type = "boolean"

[tools.count.params.x]
type = "number"
min = 0.5
"#;

/// Every diagnostic names the file and a position inside the text, with a message.
fn check_diagnostics(name: &str, text: &str, diagnostics: &[Diagnostic]) -> Result<(), TestCaseError> {
    let lines = u32::try_from(text.split('\n').count()).unwrap();
    for d in diagnostics {
        prop_assert_eq!(d.file.to_str(), Some(name), "{}", d);
        prop_assert!(d.line >= 1 && d.line <= lines, "line out of range ({} lines): {}", lines, d);
        prop_assert!(d.column >= 1, "{}", d);
        let line_text = text.split('\n').nth(d.line as usize - 1).unwrap_or("");
        prop_assert!(
            d.column as usize <= line_text.chars().count() + 1,
            "column past the end of line {:?}: {}",
            line_text,
            d
        );
        prop_assert!(!d.message.trim().is_empty(), "{}", d);
        let shown = d.to_string();
        prop_assert!(shown.starts_with(&format!("{name}:{}:{}: ", d.line, d.column)), "{}", shown);
    }
    Ok(())
}

fn load(name: &str, text: &str) -> Result<Result<PolicySet, LoadError>, TestCaseError> {
    let result = load_sources(&[(PathBuf::from(name), text.to_string())], &HOST);
    match &result {
        Ok(set) => check_diagnostics(name, text, &set.diagnostics)?,
        Err(e) => {
            prop_assert!(e.diagnostics.iter().any(Diagnostic::is_error), "a failed load names an error");
            check_diagnostics(name, text, &e.diagnostics)?;
        }
    }
    Ok(result)
}

/// Tokens that make TOML almost right.
fn token() -> impl Strategy<Value = String> {
    let keys: Vec<String> =
        TOOL_KEYS.iter().chain(PARAM_KEYS.iter()).map(|k| k.name.to_string()).chain(["version".into()]).collect();
    prop_oneof![
        proptest::sample::select(keys),
        proptest::sample::select(vec![
            "\"",
            "'",
            "[",
            "]",
            "[[",
            "]]",
            "{",
            "}",
            "=",
            ",",
            ".",
            "\n",
            "#",
            "{{",
            "}}",
            "\\",
            "\"\"\"",
            "tools.",
            "params.",
            "true",
            "-1",
            "1e400",
            "9223372036854775808",
            "\"1h\"",
            "\"10GiB\"",
            "\u{0}",
            "\u{202e}",
            "é",
            "\t",
            "\r\n",
            "inf",
            "nan",
            "1979-05-27T07:32:00Z",
        ])
        .prop_map(str::to_string),
        "[ -~]{0,12}",
    ]
}

#[derive(Debug, Clone)]
enum Edit {
    Delete { at: usize, len: usize },
    Insert { at: usize, text: String },
    DuplicateLine(usize),
    SwapLines(usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 0usize..40).prop_map(|(at, len)| Edit::Delete { at, len }),
        (any::<usize>(), token()).prop_map(|(at, text)| Edit::Insert { at, text }),
        any::<usize>().prop_map(Edit::DuplicateLine),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::SwapLines(a, b)),
    ]
}

fn floor_boundary(text: &str, mut at: usize) -> usize {
    at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut text = text.to_string();
    for e in edits {
        match e {
            Edit::Delete { at, len } => {
                let start = floor_boundary(&text, at % (text.len() + 1));
                let end = floor_boundary(&text, start + len);
                text.replace_range(start..end, "");
            }
            Edit::Insert { at, text: t } => {
                let at = floor_boundary(&text, at % (text.len() + 1));
                text.insert_str(at, t);
            }
            Edit::DuplicateLine(i) => {
                let mut lines: Vec<&str> = text.split('\n').collect();
                let i = i % lines.len();
                lines.insert(i, lines[i]);
                text = lines.join("\n");
            }
            Edit::SwapLines(a, b) => {
                let mut lines: Vec<&str> = text.split('\n').collect();
                let n = lines.len();
                lines.swap(a % n, b % n);
                text = lines.join("\n");
            }
        }
    }
    text
}

#[test]
fn the_valid_starting_point_loads() {
    let set = load_sources(&[(PathBuf::from("p.toml"), VALID.to_string())], &HOST).unwrap();
    assert_eq!(set.tools.len(), 2);
}

proptest! {
    #![proptest_config(config(256))]

    /// Any string: never a panic; either tools or errors, each with its line and column.
    #[test]
    fn any_text_loads_or_is_rejected_with_positions(text in "\\PC{0,400}") {
        let _loaded = load("any.toml", &text)?;
    }

    /// Any bytes, read as a policy file would be (invalid UTF-8 replaced).
    #[test]
    fn any_bytes_load_or_are_rejected_with_positions(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _loaded = load("bytes.toml", &String::from_utf8_lossy(&bytes))?;
    }

    /// A valid policy with a few edits: almost-right TOML reaches the deep rules of the parser.
    #[test]
    fn near_valid_policies_load_or_are_rejected_with_positions(edits in proptest::collection::vec(edit(), 1..6)) {
        let text = apply(VALID, &edits);
        let _loaded = load("near.toml", &text)?;
    }

    /// Every tool that loads validates any JSON without panicking; each rejection carries one of
    /// the stable codes (never UNKNOWN_TOOL: the tool is known) and a message.
    #[test]
    fn the_validator_answers_any_json_with_a_stable_code(
        edits in proptest::collection::vec(edit(), 0..3),
        args in json_args(),
    ) {
        let text = apply(VALID, &edits);
        if let Ok(Ok(set)) = load("v.toml", &text) {
            for tool in &set.tools {
                if let Err(e) = validate(tool, &args) {
                    prop_assert!(ErrorCode::VALIDATION.contains(&e.code));
                    prop_assert!(e.code != ErrorCode::UnknownTool);
                    prop_assert!(!e.message.trim().is_empty(), "{}", e);
                    if let Some(field) = &e.field {
                        prop_assert!(args.get(field).is_some() || tool.param(field).is_some(), "{} names {}", e, field);
                    }
                }
            }
        }
    }
}

/// Arbitrary JSON, biased towards objects whose keys are the example tools' params.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f).map(Value::Number)),
        (-20i64..20).prop_map(Value::from),
        "\\PC{0,20}".prop_map(Value::from),
        proptest::sample::select(vec!["-rf", "", ".", "..", "/", "/etc/passwd", "a/../../b", "a\u{0}b", "a", "b", "5"])
            .prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z]{1,4}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn json_args() -> impl Strategy<Value = Value> {
    let names = proptest::sample::select(vec!["pattern", "path", "n", "mode", "flag", "x", "zzz", "PATH"]);
    prop_oneof![
        1 => json_value(),
        4 => proptest::collection::btree_map(names, json_value(), 0..5)
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
    ]
}
