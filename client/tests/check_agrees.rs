//! Property test: the front-end's JSON Schema check (`cordon mcp`, client/src/mcp/check.rs) and the
//! daemon's validator (daemon/src/validate.rs) agree on every input for generated tools: both
//! accept, or both reject with the same stable code. The one documented exception is path
//! arithmetic the schema cannot express (a `..` that climbs out, a relative path without a
//! working directory): the daemon alone rejects those. Fixed seed and case budget.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use cordon_client::grpc::{ParamInfo, ToolInfo};
use cordon_client::mcp::check::ArgCheck;
use cordon_core::policy::{Host, Tool, load_sources};
use cordon_core::validate::{ErrorCode, validate};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use serde_json::Value;

fn config() -> Config {
    Config { cases: 512, failure_persistence: None, rng_seed: RngSeed::Fixed(0x00c0_4d08), ..Config::default() }
}

const NAMES: [&str; 4] = ["p0", "p1", "p2", "p3"];

/// One `[tools.t.params.NAME]` line.
fn param(name: &'static str) -> impl Strategy<Value = String> {
    let string = (
        proptest::option::of(proptest::sample::select(vec![
            "[a-z]+",
            "[0-9]+|-[0-9]+",
            "\\\\w+",
            "\\\\d{1,3}",
            "a|b",
            ".*",
            "[^/]+",
            "\\\\S+\\\\s?",
            "-.*",
        ])),
        proptest::option::of(0u32..3),
        proptest::option::of(2u32..8),
    )
        .prop_map(|(pattern, min, max)| {
            let mut keys = vec!["type = \"string\"".to_string()];
            keys.extend(pattern.map(|p| format!("pattern = \"{p}\"")));
            keys.extend(min.map(|m| format!("min_length = {m}")));
            keys.extend(max.map(|m| format!("max_length = {m}")));
            keys
        });
    let integer = (proptest::option::of(-10i64..1), proptest::option::of(0i64..10)).prop_map(|(min, max)| {
        let mut keys = vec!["type = \"integer\"".to_string()];
        keys.extend(min.map(|m| format!("min = {m}")));
        keys.extend(max.map(|m| format!("max = {m}")));
        keys
    });
    let number = (proptest::option::of(-2.5f64..0.5), proptest::option::of(0.5f64..100.0)).prop_map(|(min, max)| {
        let mut keys = vec!["type = \"number\"".to_string()];
        keys.extend(min.map(|m| format!("min = {m:?}")));
        keys.extend(max.map(|m| format!("max = {m:?}")));
        keys
    });
    let boolean = Just(vec!["type = \"boolean\"".to_string()]);
    let enumeration = proptest::sample::subsequence(vec!["a", "b", "-x", "A", "é"], 1..4).prop_map(|values| {
        let listed: Vec<String> = values.iter().map(|v| format!("\"{v}\"")).collect();
        vec!["type = \"enum\"".to_string(), format!("values = [{}]", listed.join(", "))]
    });
    let path = proptest::option::of(1u32..12).prop_map(|max| {
        let mut keys = vec!["type = \"path\"".to_string()];
        keys.extend(max.map(|m| format!("max_length = {m}")));
        keys
    });
    (prop_oneof![string, integer, number, boolean, enumeration, path], proptest::bool::weighted(0.2), any::<bool>())
        .prop_map(move |(mut keys, required, secret)| {
            if required {
                keys.push("required = true".into());
            }
            if secret {
                keys.push("secret = true".into());
            }
            format!("{name} = {{ {} }}", keys.join(", "))
        })
}

/// A tool with up to four params (and maybe a working directory), as the daemon loads it.
fn tool() -> impl Strategy<Value = Option<Tool>> {
    (0usize..=4, any::<bool>())
        .prop_flat_map(|(n, working_dir)| {
            let params: Vec<_> = NAMES[..n].iter().map(|name| param(name)).collect();
            (params, Just(n), Just(working_dir))
        })
        .prop_map(|(params, n, working_dir)| {
            let placeholders: Vec<String> = NAMES[..n].iter().map(|p| format!("\"{{{{{p}}}}}\"")).collect();
            let mut command = vec!["\"/bin/echo\"".to_string()];
            command.extend(placeholders);
            let text = format!(
                "version = 1\n\n[tools.t]\ndescription = \"generated\"\nreason = \"tests\"\ncommand = [{}]\n{}\n\n\
                 [tools.t.params]\n{}\n",
                command.join(", "),
                if working_dir { "working_dir = \"/srv/w\"" } else { "" },
                params.join("\n")
            );
            load_sources(&[(PathBuf::from("t.toml"), text)], &Host::new(false, 6))
                .ok()
                .and_then(|set| set.tools.into_iter().next())
        })
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-20i64..20).prop_map(Value::from),
        (-20.0f64..120.0).prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f).map(Value::Number)),
        "\\PC{0,12}".prop_map(Value::from),
        "[a-z0-9/. -]{0,10}".prop_map(Value::from),
        proptest::sample::select(vec![
            "-rf",
            "",
            ".",
            "..",
            "/",
            "/etc/passwd",
            "a/../../b",
            "a\u{0}b",
            "a",
            "b",
            "A",
            "-x",
            "é",
            "12",
            "-3",
            "a b",
            "a\tb",
            "١٢٣",
            "x/..",
            "/..",
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z]{1,3}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A value aimed at the params' rules: near the bounds, lengths and patterns the generated
/// tools use, or anything at all.
fn aimed_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        2 => json_value(),
        2 => "[a-z]{0,9}".prop_map(Value::from),
        1 => "[0-9-]{0,5}".prop_map(Value::from),
        1 => "[a-zA-Z0-9_/. \t-]{0,10}".prop_map(Value::from),
        2 => (-12i64..12).prop_map(Value::from),
        1 => (-3.0f64..110.0).prop_map(Value::from),
    ]
}

/// Arguments for a tool whose params are `n` of [`NAMES`]: mostly its own fields, sometimes an
/// unknown one, sometimes not an object at all.
fn json_args(n: usize) -> impl Strategy<Value = Value> {
    let mut names: Vec<&'static str> = NAMES[..n].to_vec();
    names.push("zz");
    let own = proptest::collection::btree_map(proptest::sample::select(names), aimed_value(), 0..=n + 1)
        .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()));
    let strict = proptest::collection::btree_map(
        proptest::sample::select(if n == 0 { vec!["zz"] } else { NAMES[..n].to_vec() }),
        aimed_value(),
        0..=n,
    )
    .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()));
    prop_oneof![1 => json_value(), 3 => own, 6 => strict]
}

/// A generated tool and arguments for it.
fn case() -> impl Strategy<Value = (Option<Tool>, Value)> {
    tool().prop_flat_map(|tool| {
        let n = tool.as_ref().map_or(0, |t| t.params.len());
        (Just(tool), json_args(n))
    })
}

/// What the front-end gets from `ListTools`, built from the daemon's tool.
fn info(tool: &Tool) -> ToolInfo {
    let mut info = ToolInfo::minimal(tool.name.clone());
    info.input_schema = tool.input_schema.clone();
    info.params = tool
        .params
        .iter()
        .map(|p| ParamInfo {
            name: p.name.clone(),
            kind: p.kind.type_name().to_string(),
            description: p.description.clone().unwrap_or_default(),
            required: p.required,
            default: p.default.clone(),
            secret: p.secret,
        })
        .collect();
    info
}

/// The path rules only the daemon can apply.
fn path_only(tool: &Tool, field: Option<&str>, args: &Value) -> bool {
    let Some(param) = field.and_then(|f| tool.param(f)) else { return false };
    if param.kind.type_name() != "path" {
        return false;
    }
    let Some(text) = field.and_then(|f| args.get(f)).and_then(Value::as_str) else { return false };
    text.split('/').any(|c| c == "..") || (!text.starts_with('/') && tool.working_dir.is_none())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn the_front_end_check_and_the_daemon_agree((tool, args) in case()) {
        let Some(tool) = tool else { return Ok(()) };
        let check = ArgCheck::new(&info(&tool)).map_err(|e| TestCaseError::fail(format!("schema does not compile: {e}")))?;
        let by_front = check.check(&args);
        let by_daemon = validate(&tool, &args);
        match (&by_front, &by_daemon) {
            (Ok(()), Ok(_)) => {}
            // The daemon stopped at a path rule the schema cannot express; the front-end went on to
            // a later problem. Both reject.
            (Err(_), Err(d)) if d.code == ErrorCode::InvalidFieldValue && path_only(&tool, d.field.as_deref(), &args) => {}
            (Err(f), Err(d)) => {
                prop_assert!(ErrorCode::parse(f.code).is_some(), "front-end code {} is not a stable code", f.code);
                prop_assert!(!f.message.trim().is_empty());
                prop_assert_eq!(
                    f.code, d.code.as_str(),
                    "codes differ for {} on {}:\nfront-end: {}\ndaemon: {}\nschema: {}",
                    args, tool.name, f.message, d.message, tool.input_schema
                );
            }
            (Ok(()), Err(d)) if d.code == ErrorCode::InvalidFieldValue && path_only(&tool, d.field.as_deref(), &args) => {}
            _ => prop_assert!(
                false,
                "disagreement on {}:\nfront-end: {:?}\ndaemon: {:?}\nschema: {}",
                args, by_front, by_daemon.map(|_| "ok"), tool.input_schema
            ),
        }
    }
}
