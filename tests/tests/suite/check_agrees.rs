//! The MCP front-end's argument check (`cordon mcp`, client/src/mcp/check.rs) and the daemon's
//! validator give the same verdict: both accept, or both reject with the same code, field AND
//! message. The front-end's params are rebuilt the way it gets them: the daemon's conversion to
//! `cordon.v1` (daemon/src/server/convert.rs), encoded and decoded, then rebuilt by the client
//! (client/src/api/tools.rs). A property test over generated tools (fixed seed and case budget), and
//! the rules that must not rebuild (the front-end then refuses the tool's calls: fail closed).

use std::path::PathBuf;

use cordon_client::api::{RulesError, ToolInfo};
use cordon_client::mcp::check::ArgCheck;
use cordon_core::policy::{Host, Tool, load_sources};
use cordon_core::validate::validate;
use cordon_proto::v1;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use prost::Message as _;
use serde_json::{Value, json};

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
                .map(std::sync::Arc::unwrap_or_clone)
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

/// What the front-end gets from `ListTools`: the daemon's conversion, through the wire.
fn wire(tool: &Tool) -> v1::Tool {
    let sent = cordon_daemon::fuzzing::listed_tool(tool, &tool.availability);
    v1::Tool::decode(sent.encode_to_vec().as_slice()).unwrap()
}

/// The front-end's check of a daemon tool.
fn front_end(tool: &Tool) -> Result<ArgCheck, RulesError> {
    ArgCheck::new(&ToolInfo::from(wire(tool)))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn the_front_end_check_and_the_daemon_agree((tool, args) in case()) {
        // not a skip: a generated tool the policy rejects has no check to compare (the case counts)
        let Some(tool) = tool else { return Ok(()) };
        let check = front_end(&tool).map_err(|e| TestCaseError::fail(format!("the rules do not rebuild: {e}")))?;
        let by_front = check.check(&args);
        let by_daemon = validate(&tool, &args).map(|_| ());
        prop_assert_eq!(
            &by_front, &by_daemon,
            "verdicts differ for {} on a tool with params {:?} (working_dir {:?})", args, tool.params, tool.working_dir
        );
    }
}

/// One tool from policy text.
fn load(params: &str, keys: &str) -> Tool {
    let text = format!(
        "version = 1\n\n[tools.t]\ndescription = \"d\"\nreason = \"r\"\ncommand = [\"/bin/echo\"]\n{keys}\n\n\
         [tools.t.params]\n{params}\n"
    );
    let set = load_sources(&[(PathBuf::from("t.toml"), text)], &Host::new(false, 6)).unwrap();
    std::sync::Arc::unwrap_or_clone(set.tools.into_iter().next().unwrap())
}

/// Every rule of every kind survives the round trip, and the messages carry the daemon's ranges,
/// patterns as written and "did you mean" hints.
#[test]
fn every_rule_survives_the_round_trip() {
    let tool = load(
        r#"name = { type = "string", pattern = "\\w+", min_length = 2, max_length = 5, description = "a name" }
count = { type = "integer", min = -3, max = 9 }
ratio = { type = "number", min = 0.5, max = 2.5, default = 1.0 }
mode = { type = "enum", values = ["fast", "slow"] }
file = { type = "path", min_length = 3, max_length = 20 }
flag = { type = "boolean" }
token = { type = "string", secret = true, required = true }"#,
        r#"working_dir = "/srv/w""#,
    );
    let check = front_end(&tool).unwrap();
    for args in [
        json!({ "token": "t", "name": "a" }),
        json!({ "token": "t", "name": "abcdef" }),
        json!({ "token": "t", "name": "a-b" }),
        json!({ "token": "t", "count": -4 }),
        json!({ "token": "t", "count": 10 }),
        json!({ "token": "t", "count": 2.5 }),
        json!({ "token": "t", "ratio": 0.25 }),
        json!({ "token": "t", "ratio": 3 }),
        json!({ "token": "t", "mode": "fats" }),
        json!({ "token": "t", "file": "ab" }),
        json!({ "token": "t", "file": "../../../etc" }),
        json!({ "token": "t", "file": "a/very/long/path/name/here" }),
        json!({ "token": "t", "flag": "yes" }),
        json!({ "token": 5 }),
        json!({}),
        json!({ "token": "t", "nmae": "x" }),
        json!({ "token": "t", "a": 1, "b": 2 }),
        json!([1]),
        json!({ "token": "t", "name": "ab", "count": 0, "mode": "slow", "file": "x/y", "flag": true }),
    ] {
        assert_eq!(check.check(&args), validate(&tool, &args).map(|_| ()), "{args}");
    }
    let e = check.check(&json!({ "token": "t", "nmae": "x" })).unwrap_err();
    assert!(e.message.contains("did you mean \"name\""), "{e}");
    let e = check.check(&json!({ "token": "t", "count": 10 })).unwrap_err();
    assert!(e.message.contains("above the maximum 9"), "{e}");
    let e = check.check(&json!({ "token": "t", "name": "a-b" })).unwrap_err();
    assert!(e.message.contains("does not match the pattern \\w+"), "the pattern as written: {e}");
    let e = check.check(&json!({ "token": "t", "file": "../../../etc" })).unwrap_err();
    assert!(e.message.contains("climb above /srv/w"), "the working directory travels too: {e}");
}

/// Rules that do not rebuild make the front-end refuse the tool, never check it loosely.
#[test]
fn rules_that_do_not_rebuild_are_refused() {
    let tool = load(
        r#"s = { type = "string", pattern = "[a-z]+" }
n = { type = "number", max = 5.0 }
e = { type = "enum", values = ["a"] }"#,
        "",
    );
    let sent = wire(&tool);
    let broken = |edit: &dyn Fn(&mut v1::Tool)| {
        let mut t = sent.clone();
        edit(&mut t);
        ArgCheck::new(&ToolInfo::from(t)).map(|_| ()).unwrap_err()
    };
    assert!(ArgCheck::new(&ToolInfo::from(sent.clone())).is_ok());
    let set_rules = |i: usize, rules: v1::param::Rules| move |t: &mut v1::Tool| t.params[i].rules = Some(rules.clone());
    let e = broken(&set_rules(
        0,
        v1::param::Rules::StringRules(v1::StringRules { pattern: Some("(?i)a".into()), ..Default::default() }),
    ));
    assert!(matches!(e, RulesError::Pattern { .. }) && e.to_string().contains("unsupported pattern"), "{e}");
    let e = broken(&set_rules(
        0,
        v1::param::Rules::StringRules(v1::StringRules { pattern: Some("(a".into()), ..Default::default() }),
    ));
    assert!(e.to_string().contains("invalid pattern \"(a\""), "{e}");
    let e = broken(&set_rules(1, v1::param::Rules::NumberRules(v1::NumberRules { min: None, max: Some(f64::NAN) })));
    assert!(matches!(e, RulesError::NotFinite { .. }), "{e}");
    let e = broken(&set_rules(
        0,
        v1::param::Rules::StringRules(v1::StringRules {
            min_length: Some(5),
            max_length: Some(2),
            ..Default::default()
        }),
    ));
    assert!(matches!(e, RulesError::Order { .. }), "{e}");
    let e = broken(&set_rules(2, v1::param::Rules::EnumRules(v1::EnumRules { values: vec![] })));
    assert!(matches!(e, RulesError::NoValues { .. }), "{e}");
    let e = broken(&set_rules(1, v1::param::Rules::IntegerRules(v1::IntegerRules { min: None, max: Some(1) })));
    assert!(matches!(e, RulesError::Rules { .. }), "another type's rules: {e}");
    let e = broken(&|t: &mut v1::Tool| t.params[0].rules = None);
    assert!(matches!(e, RulesError::Rules { .. }), "no rules: {e}");
    let e = broken(&|t: &mut v1::Tool| t.params[0].r#type = "regex".into());
    assert!(matches!(e, RulesError::UnknownType { .. }), "{e}");
    let e = broken(&|t: &mut v1::Tool| t.params[1].default_json = "{".into());
    assert!(matches!(e, RulesError::Default { .. }), "{e}");
    let e = broken(&|t: &mut v1::Tool| t.params[1].name = "s".into());
    assert!(matches!(e, RulesError::Duplicate { .. }), "{e}");
    let e = broken(&|t: &mut v1::Tool| t.working_dir = "rel".into());
    assert!(matches!(e, RulesError::WorkingDir { .. }), "{e}");
}
