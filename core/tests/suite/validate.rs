//! Argument validation and argv planning through the library, with tools built from small
//! policy texts; and agreement between `validate()` and the JSON Schema each tool advertises.

use std::path::{Path, PathBuf};

use cordon_core::argv::{Account, BASE_ENV, Plan, REDACTED, plan};
use cordon_core::policy::{Host, SEARCH_PATH, Tool, load_sources, schema};
use cordon_core::validate::{
    ArgValue, Arguments, ErrorCode, MAX_SAFE_INTEGER, ValidationError, parse_arguments, validate,
};
use serde_json::{Value, json};

/// Builds the single tool `t` from its command, extra tool keys and `[tools.t.params]` lines
/// (`name = { type = "string", ... }`).
#[track_caller]
fn tool(command: &str, keys: &str, params: &str) -> Tool {
    let text = format!(
        "version = 1\n\n[tools.t]\ndescription = \"test tool\"\nreason = \"test\"\ncommand = {command}\n{keys}\n\n\
         [tools.t.params]\n{params}\n"
    );
    let set = load_sources(&[(PathBuf::from("t.toml"), text.clone())], &Host::new(false, 6))
        .unwrap_or_else(|e| panic!("policy does not load:\n{text}\n{e}"));
    assert!(set.diagnostics.iter().all(|d| !d.is_error()));
    std::sync::Arc::unwrap_or_clone(set.tools.into_iter().next().expect("one tool"))
}

#[track_caller]
fn ok(t: &Tool, args: Value) -> Arguments {
    validate(t, &args).unwrap_or_else(|e| panic!("{args} should be valid for {}: {e}", t.name))
}

#[track_caller]
fn err(t: &Tool, args: Value) -> ValidationError {
    match validate(t, &args) {
        Ok(a) => panic!("{args} should be rejected by {}, got {a:?}", t.name),
        Err(e) => e,
    }
}

/// Asserts the code, and that the message contains every fragment.
#[track_caller]
fn rejects(t: &Tool, args: Value, code: ErrorCode, fragments: &[&str]) -> ValidationError {
    let e = err(t, args.clone());
    assert_eq!(e.code, code, "code for {args}: {e}");
    for f in fragments {
        assert!(e.message.contains(f), "message for {args} lacks {f:?}: {}", e.message);
    }
    e
}

#[track_caller]
fn value(t: &Tool, args: Value, name: &str) -> ArgValue {
    ok(t, args).get(name).cloned().unwrap_or_else(|| panic!("no value for {name}"))
}

fn account() -> Account {
    Account { user: "u".into(), home: "/h".into(), gid: None }
}

#[track_caller]
fn plan_for(t: &Tool, args: Value) -> Plan {
    let a = ok(t, args);
    plan(t, Path::new("/usr/bin/echo"), &a, &account())
}

#[track_caller]
fn argv(t: &Tool, args: Value) -> Vec<String> {
    plan_for(t, args).argv
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

// ----- error codes -----

#[test]
fn error_codes_have_their_stable_names() {
    let names: Vec<&str> = ErrorCode::VALIDATION.iter().map(|c| c.as_str()).collect();
    assert_eq!(
        names,
        ["UNKNOWN_TOOL", "MISSING_REQUIRED_FIELD", "INVALID_FIELD_TYPE", "INVALID_FIELD_VALUE", "UNKNOWN_FIELDS"]
    );
    for c in ErrorCode::VALIDATION {
        assert_eq!(c.to_string(), c.as_str());
        assert_eq!(ErrorCode::parse(c.as_str()), Some(c));
    }
    assert_eq!(ErrorCode::parse("unknown_tool"), None);
}

fn greet() -> Tool {
    tool(
        r#"["echo", "{{name}}", "{{count}}"]"#,
        "",
        r#"name = { type = "string", required = true, description = "who to greet" }
count = { type = "integer", min = 1, max = 10 }"#,
    )
}

#[test]
fn unknown_fields_are_named_with_the_fields_the_tool_takes() {
    let t = greet();
    let e = rejects(&t, json!({"name": "a", "nme": "b"}), ErrorCode::UnknownFields, &[]);
    assert_eq!(e.message, r#"unknown field "nme"; tool "t" takes: name, count; did you mean "name"?"#);
    assert_eq!(e.field.as_deref(), Some("nme"));
    // Two neighbouring letters swapped count as one typo: "nmae" is one edit away from "name".
    let e = rejects(&t, json!({"nmae": "a"}), ErrorCode::UnknownFields, &[]);
    assert_eq!(e.message, r#"unknown field "nmae"; tool "t" takes: name, count; did you mean "name"?"#);
    let e = rejects(&t, json!({"name": "a", "cuont": 1}), ErrorCode::UnknownFields, &[]);
    assert!(e.message.ends_with(r#"; did you mean "count"?"#), "{}", e.message);
    // Two swaps are two edits: too far for a four-letter name.
    let e = rejects(&t, json!({"anem": "a"}), ErrorCode::UnknownFields, &[]);
    assert_eq!(e.message, r#"unknown field "anem"; tool "t" takes: name, count"#);

    let e = rejects(&t, json!({"name": "a", "x": 1, "y": 2}), ErrorCode::UnknownFields, &[]);
    assert_eq!(e.message, r#"unknown fields "x", "y"; tool "t" takes: name, count"#);
    assert_eq!(e.field, None);

    // Unknown fields are reported before anything else is looked at.
    rejects(&t, json!({"bogus": null}), ErrorCode::UnknownFields, &["\"bogus\""]);

    let none = tool(r#"["true"]"#, "", "");
    let e = rejects(&none, json!({"a": 1}), ErrorCode::UnknownFields, &[]);
    assert_eq!(e.message, r#"unknown field "a"; tool "t" takes no arguments"#);
    assert!(ok(&none, json!({})).iter().next().is_none());
}

#[test]
fn a_missing_required_field_is_named_with_what_it_expects() {
    let t = greet();
    let e = rejects(&t, json!({"count": 3}), ErrorCode::MissingRequiredField, &[]);
    assert_eq!(e.message, r#"missing required field "name" (a string: who to greet)"#);
    assert_eq!(e.field.as_deref(), Some("name"));
    // An optional param may be omitted.
    assert_eq!(ok(&t, json!({"name": "a"})).get("count"), None);
}

#[test]
fn wrong_types_and_wrong_values_have_their_own_codes() {
    let t = greet();
    let e = rejects(&t, json!({"name": "a", "count": "5"}), ErrorCode::InvalidFieldType, &[]);
    assert_eq!(e.message, r#"field "count" must be an integer from 1 to 10, got a string ("5")"#);
    assert_eq!(e.field.as_deref(), Some("count"));
    let e = rejects(&t, json!({"name": "a", "count": 11}), ErrorCode::InvalidFieldValue, &[]);
    assert_eq!(e.message, r#"field "count": 11 is above the maximum 10"#);
    assert_eq!(e.to_string(), r#"INVALID_FIELD_VALUE: field "count": 11 is above the maximum 10"#);
    rejects(&t, json!({"name": ["a"]}), ErrorCode::InvalidFieldType, &["\"name\" must be a string", "got an array"]);
    rejects(&t, json!({"name": {"a": 1}}), ErrorCode::InvalidFieldType, &["got an object"]);
}

#[test]
fn arguments_must_be_a_json_object() {
    let t = greet();
    for (args, shown) in [
        (json!([]), "got an array"),
        (json!("name=a"), "got a string (\"name=a\")"),
        (json!(null), "got null"),
        (json!(1), "got an integer (1)"),
    ] {
        let e = rejects(&t, args, ErrorCode::InvalidFieldType, &["arguments must be a JSON object", shown]);
        assert_eq!(e.field, None);
    }
    assert_eq!(parse_arguments("").unwrap(), json!({}));
    assert_eq!(parse_arguments("  \n").unwrap(), json!({}));
    assert_eq!(parse_arguments(r#"{"a": 1}"#).unwrap(), json!({"a": 1}));
    let e = parse_arguments("{\"a\": ").unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidFieldType);
    assert!(e.message.contains("arguments are not valid JSON"), "{}", e.message);
}

// ----- strings -----

#[test]
fn a_string_without_a_pattern_rejects_a_leading_dash_but_accepts_the_empty_string() {
    let t = tool(r#"["git", "log", "{{rev}}"]"#, "", r#"rev = { type = "string" }"#);
    let e = rejects(&t, json!({"rev": "--upload-pack=x"}), ErrorCode::InvalidFieldValue, &[]);
    assert_eq!(
        e.message,
        r#"field "rev": "--upload-pack=x" starts with "-"; values of this field may not look like command-line options"#
    );
    rejects(&t, json!({"rev": "-"}), ErrorCode::InvalidFieldValue, &["starts with \"-\""]);
    assert_eq!(value(&t, json!({"rev": ""}), "rev"), ArgValue::String(String::new()));
    assert_eq!(value(&t, json!({"rev": "a-b"}), "rev"), ArgValue::String("a-b".into()));
    assert_eq!(value(&t, json!({"rev": " -x"}), "rev"), ArgValue::String(" -x".into()));

    // A pattern takes over: the admin decided which values are fine.
    let t = tool(r#"["ls", "{{flag}}"]"#, "", r#"flag = { type = "string", pattern = "-[a-z]" }"#);
    assert_eq!(value(&t, json!({"flag": "-l"}), "flag"), ArgValue::String("-l".into()));
}

#[test]
fn patterns_match_the_whole_value() {
    let t = tool(r#"["echo", "{{w}}"]"#, "", r#"w = { type = "string", pattern = "[a-z]+" }"#);
    let e = rejects(&t, json!({"w": ""}), ErrorCode::InvalidFieldValue, &[]);
    assert_eq!(e.message, r#"field "w": "" does not match the pattern [a-z]+"#);
    for bad in ["abc1", "1abc", "ab c", "abc\n", "\nabc", "ABC"] {
        rejects(&t, json!({ "w": bad }), ErrorCode::InvalidFieldValue, &["does not match the pattern [a-z]+"]);
    }
    assert_eq!(value(&t, json!({"w": "abc"}), "w"), ArgValue::String("abc".into()));

    // Anchoring wraps the whole alternation, not only its ends.
    let t = tool(r#"["echo", "{{w}}"]"#, "", r#"w = { type = "string", pattern = "a|b" }"#);
    for bad in ["ab", "ax", "xb", ""] {
        rejects(&t, json!({ "w": bad }), ErrorCode::InvalidFieldValue, &["does not match"]);
    }
    ok(&t, json!({"w": "a"}));
    ok(&t, json!({"w": "b"}));
}

#[test]
fn string_lengths_count_characters() {
    let t = tool(r#"["echo", "{{w}}"]"#, "", r#"w = { type = "string", min_length = 2, max_length = 3 }"#);
    ok(&t, json!({"w": "ab"}));
    ok(&t, json!({"w": "äöü"}));
    let e = rejects(&t, json!({"w": "a"}), ErrorCode::InvalidFieldValue, &[]);
    assert_eq!(e.message, r#"field "w": is 1 characters long; the minimum is 2"#);
    rejects(&t, json!({"w": "abcd"}), ErrorCode::InvalidFieldValue, &["is 4 characters long; the maximum is 3"]);
}

#[test]
fn a_nul_byte_is_always_rejected() {
    let t = tool(
        r#"["echo", "{{s}}", "{{any}}", "{{p}}"]"#,
        r#"working_dir = "/srv""#,
        r#"s = { type = "string" }
any = { type = "string", pattern = '(?:[^\n]|\n)*' }
p = { type = "path" }"#,
    );
    for field in ["s", "any", "p"] {
        for v in ["a\0b", "\0", "x\0"] {
            let e = rejects(&t, json!({ field: v }), ErrorCode::InvalidFieldValue, &[]);
            assert_eq!(e.message, format!("field {field:?}: contains a NUL byte, which is never allowed"));
        }
    }
    // A pattern that admits every character still does not admit NUL.
    ok(&t, json!({"any": "-\n\t\u{7f}"}));
}

// ----- null, integers, numbers, booleans, enums -----

#[test]
fn null_is_not_a_value() {
    let t = tool(
        r#"["echo", "{{s}}", "{{i}}", "{{n}}", "{{b}}", "{{e}}", "{{p}}", "{{r}}"]"#,
        "",
        r#"s = { type = "string" }
i = { type = "integer" }
n = { type = "number" }
b = { type = "boolean" }
e = { type = "enum", values = ["x"] }
p = { type = "path" }
r = { type = "string", required = true }"#,
    );
    for field in ["s", "i", "n", "b", "e", "p"] {
        let e = rejects(&t, json!({ field: null, "r": "x" }), ErrorCode::InvalidFieldType, &["got null"]);
        assert!(e.message.ends_with("; null is not a value, omit the field instead"), "{}", e.message);
        assert_eq!(e.field.as_deref(), Some(field));
    }
    let e = rejects(&t, json!({ "r": null }), ErrorCode::InvalidFieldType, &[]);
    assert_eq!(e.message, r#"field "r" must be a string, got null; null is not a value"#);
}

/// Without `min`, a number param takes no negative values: `-5` substituted as an argv element
/// reads as an option, the same reason a string without a `pattern` may not start with `-`.
#[test]
fn numbers_without_a_min_take_no_negative_values() {
    let t = tool(
        r#"["kill", "{{pid}}", "{{x}}", "{{neg}}"]"#,
        "",
        r#"pid = { type = "integer" }
x = { type = "number", max = 10 }
neg = { type = "integer", min = -20, max = 19 }"#,
    );
    for (field, v) in [("pid", json!(-1)), ("pid", json!(-1.0)), ("x", json!(-0.5))] {
        let e = rejects(&t, json!({ field: v }), ErrorCode::InvalidFieldValue, &["is negative"]);
        assert!(e.message.ends_with("takes no negative values (they could read as options)"), "{}", e.message);
    }
    assert_eq!(value(&t, json!({"pid": 0}), "pid"), ArgValue::Integer(0));
    assert_eq!(value(&t, json!({"neg": -5}), "neg"), ArgValue::Integer(-5));
    let schema = &t.input_schema.value();
    assert_eq!(schema["properties"]["pid"]["minimum"], 0);
    assert_eq!(schema["properties"]["x"]["minimum"], 0.0);
    assert_eq!(schema["properties"]["neg"]["minimum"], -20);
}

#[test]
fn integers_are_strict() {
    let t = tool(
        r#"["echo", "{{i}}", "{{u}}"]"#,
        "",
        r#"i = { type = "integer", min = -3, max = 7 }
u = { type = "integer" }"#,
    );
    for v in [json!("5"), json!(5.5), json!(true), json!([5]), json!(0.1)] {
        rejects(&t, json!({ "i": v }), ErrorCode::InvalidFieldType, &["must be an integer from -3 to 7"]);
    }
    assert_eq!(value(&t, json!({"i": 5.0}), "i"), ArgValue::Integer(5));
    assert_eq!(value(&t, json!({"i": -0.0}), "i"), ArgValue::Integer(0));
    // Bounds are inclusive.
    assert_eq!(value(&t, json!({"i": -3}), "i"), ArgValue::Integer(-3));
    assert_eq!(value(&t, json!({"i": 7}), "i"), ArgValue::Integer(7));
    assert_eq!(value(&t, json!({"i": 7.0}), "i"), ArgValue::Integer(7));
    let e = rejects(&t, json!({"i": -4}), ErrorCode::InvalidFieldValue, &[]);
    assert_eq!(e.message, r#"field "i": -4 is below the minimum -3"#);
    let e = rejects(&t, json!({"i": 8}), ErrorCode::InvalidFieldValue, &[]);
    assert_eq!(e.message, r#"field "i": 8 is above the maximum 7"#);
    rejects(&t, json!({"i": 8.0}), ErrorCode::InvalidFieldValue, &["is above the maximum 7"]);
    rejects(&t, json!({"i": -4.0}), ErrorCode::InvalidFieldValue, &["is below the minimum -3"]);
}

/// Integers are limited to the JSON safe-integer range, ±(2^53 - 1): every integer in it is exact
/// as a JSON number everywhere, so the daemon, the JSON Schema and the agent read it alike.
#[test]
fn integers_stay_within_the_safe_integer_range() {
    const RANGE: &str = "is outside the safe integer range -9007199254740991..=9007199254740991";
    assert_eq!(MAX_SAFE_INTEGER, (1_i64 << 53) - 1);
    let t = tool(
        r#"["echo", "{{u}}", "{{i}}"]"#,
        "",
        r#"u = { type = "integer", min = -9007199254740991 }
i = { type = "integer", min = -3, max = 7 }"#,
    );
    // The bounds are inclusive, written as integers or as integral floats. (Built with json!, so
    // the floats are exact; see `a_decimal_float_from_the_wire_keeps_its_exact_value` for text.)
    for (v, n) in [
        (json!(MAX_SAFE_INTEGER), MAX_SAFE_INTEGER),
        (json!(-MAX_SAFE_INTEGER), -MAX_SAFE_INTEGER),
        (json!(9_007_199_254_740_991.0_f64), MAX_SAFE_INTEGER),
        (json!(-9_007_199_254_740_991.0_f64), -MAX_SAFE_INTEGER),
        (json!(MAX_SAFE_INTEGER - 1), MAX_SAFE_INTEGER - 1),
        (json!(1e15), 1_000_000_000_000_000),
        (json!(0), 0),
    ] {
        assert_eq!(value(&t, json!({ "u": v }), "u"), ArgValue::Integer(n), "{v}");
    }
    // One past either end, written exactly.
    let e = rejects(&t, json!({ "u": MAX_SAFE_INTEGER + 1 }), ErrorCode::InvalidFieldValue, &[]);
    assert_eq!(e.message, format!("field \"u\": 9007199254740992 {RANGE}"));
    assert_eq!(e.field.as_deref(), Some("u"));
    let e = rejects(&t, json!({ "u": -MAX_SAFE_INTEGER - 1 }), ErrorCode::InvalidFieldValue, &[]);
    assert_eq!(e.message, format!("field \"u\": -9007199254740992 {RANGE}"));
    // Everything beyond, however it is written; the 64-bit extremes are no longer special.
    for text in [
        "9007199254740992.0",
        "-9007199254740992.0",
        "9007199254740993",
        "9223372036854775807",
        "-9223372036854775808",
        "9223372036854775808",
        "9223372036854775808.0",
        "-9223372036854775808.0",
        "-9223372036854775809",
        "18446744073709551615",
        "1e19",
        "-1e19",
        "1e300",
        "1.5e300",
    ] {
        let v: Value = serde_json::from_str(text).unwrap();
        rejects(&t, json!({ "u": v }), ErrorCode::InvalidFieldValue, &[RANGE]);
    }
    // The range check comes before the param's own bounds.
    rejects(&t, json!({ "i": u64::MAX }), ErrorCode::InvalidFieldValue, &[RANGE]);
    // A fraction is a type error, however small.
    rejects(&t, json!({"u": 1e-300}), ErrorCode::InvalidFieldType, &["must be an integer"]);
    // (2^52 - 0.5 is exact as an f64; above 2^52 every f64 is integral.)
    rejects(&t, json!({"u": 4503599627370495.5}), ErrorCode::InvalidFieldType, &["must be an integer"]);
}

/// PRODUCT BUG (reported): the wire form is parsed with serde_json without its `float_roundtrip`
/// feature, whose fast float parser can be one unit in the last place off for long decimals. Near
/// 2^52..2^53 that changes what the caller sent: `4503599627370495.5` arrives as the integral
/// 4503599627370495.0 and passes as an integer, and `9007199254740991.0` arrives as
/// 9007199254740990 and is substituted as that. Both validators see the same wrong value, so the
/// schema agreement tests cannot notice. Fix: `serde_json = { version = "1", features =
/// ["float_roundtrip"] }` in the workspace.
#[test]
fn a_decimal_float_from_the_wire_keeps_its_exact_value() {
    let t = tool(
        r#"["echo", "{{u}}", "{{n}}"]"#,
        "",
        r#"u = { type = "integer", min = -9007199254740991 }
n = { type = "number", min = -1e300 }"#,
    );
    let args = |text: &str| parse_arguments(text).unwrap();
    rejects(&t, args(r#"{"u": 4503599627370495.5}"#), ErrorCode::InvalidFieldType, &["must be an integer"]);
    assert_eq!(value(&t, args(r#"{"u": 9007199254740991.0}"#), "u"), ArgValue::Integer(MAX_SAFE_INTEGER));
    assert_eq!(value(&t, args(r#"{"u": -9007199254740991.0}"#), "u"), ArgValue::Integer(-MAX_SAFE_INTEGER));
    assert_eq!(value(&t, args(r#"{"n": 4503599627370495.5}"#), "n"), ArgValue::Number(4503599627370495.5));
    assert_eq!(argv(&t, args(r#"{"n": 4503599627370495.5}"#)), strings(&["echo", "4503599627370495.5"]));
}

#[test]
fn numbers_accept_integers_and_check_inclusive_bounds() {
    let t = tool(r#"["sleep", "{{n}}"]"#, "", r#"n = { type = "number", min = 0.5, max = 2 }"#);
    assert_eq!(value(&t, json!({"n": 0.5}), "n"), ArgValue::Number(0.5));
    assert_eq!(value(&t, json!({"n": 2}), "n"), ArgValue::Number(2.0));
    assert_eq!(value(&t, json!({"n": 1.25}), "n"), ArgValue::Number(1.25));
    let e = rejects(&t, json!({"n": 0.49}), ErrorCode::InvalidFieldValue, &[]);
    assert_eq!(e.message, r#"field "n": 0.49 is below the minimum 0.5"#);
    rejects(&t, json!({"n": 2.0001}), ErrorCode::InvalidFieldValue, &["2.0001 is above the maximum 2.0"]);
    for v in [json!("1"), json!(true), json!(null), json!({})] {
        rejects(&t, json!({ "n": v }), ErrorCode::InvalidFieldType, &["must be a number"]);
    }
}

#[test]
fn booleans_are_strict() {
    let t = tool(r#"["echo", "{{b}}"]"#, "", r#"b = { type = "boolean" }"#);
    assert_eq!(value(&t, json!({"b": true}), "b"), ArgValue::Boolean(true));
    assert_eq!(value(&t, json!({"b": false}), "b"), ArgValue::Boolean(false));
    for v in [json!("true"), json!("false"), json!(1), json!(0), json!("yes"), json!([true])] {
        rejects(&t, json!({ "b": v }), ErrorCode::InvalidFieldType, &["field \"b\" must be true or false, got"]);
    }
}

#[test]
fn an_enum_error_lists_every_valid_value() {
    let t = tool(
        r#"["cargo", "build", "--profile", "{{p}}"]"#,
        "",
        r#"p = { type = "enum", values = ["dev", "release", "bench"] }"#,
    );
    let e = rejects(&t, json!({"p": "fast"}), ErrorCode::InvalidFieldValue, &[]);
    assert_eq!(e.message, r#"field "p": "fast" is not one of the valid values: "dev", "release", "bench""#);
    rejects(&t, json!({"p": "Dev"}), ErrorCode::InvalidFieldValue, &["\"dev\", \"release\", \"bench\""]);
    rejects(&t, json!({"p": ""}), ErrorCode::InvalidFieldValue, &["\"dev\", \"release\", \"bench\""]);
    let e = rejects(&t, json!({"p": 1}), ErrorCode::InvalidFieldType, &[]);
    assert_eq!(e.message, r#"field "p" must be one of "dev", "release", "bench", got an integer (1)"#);
    for v in ["dev", "release", "bench"] {
        assert_eq!(value(&t, json!({ "p": v }), "p"), ArgValue::String(v.into()));
    }
}

#[test]
fn defaults_fill_omitted_params() {
    let t = tool(
        r#"["echo", "{{c}}", "{{m}}"]"#,
        "",
        r#"c = { type = "integer", default = 3 }
m = { type = "enum", values = ["a", "b"], default = "b" }"#,
    );
    let a = ok(&t, json!({}));
    assert_eq!(a.get("c"), Some(&ArgValue::Integer(3)));
    assert_eq!(a.get("m"), Some(&ArgValue::String("b".into())));
    assert_eq!(ok(&t, json!({"c": 4})).get("c"), Some(&ArgValue::Integer(4)));
}

// ----- paths -----

#[test]
fn relative_paths_resolve_against_the_working_dir_and_may_not_escape_it() {
    let t = tool(r#"["cat", "{{f}}"]"#, r#"working_dir = "/srv/project""#, r#"f = { type = "path" }"#);
    let p = |s: &str| value(&t, json!({ "f": s }), "f");
    assert_eq!(p("src/lib.rs"), ArgValue::Path("/srv/project/src/lib.rs".into()));
    assert_eq!(p("./src//./lib.rs"), ArgValue::Path("/srv/project/src/lib.rs".into()));
    assert_eq!(p("."), ArgValue::Path("/srv/project".into()));
    assert_eq!(p("a/../b"), ArgValue::Path("/srv/project/b".into()));
    assert_eq!(p("a/b/../../c"), ArgValue::Path("/srv/project/c".into()));
    assert_eq!(
        p("-rf"),
        ArgValue::Path("/srv/project/-rf".into()),
        "a relative path never starts with - once resolved"
    );
    // Absolute paths stay absolute (the sandbox decides what is reachable), normalized.
    assert_eq!(p("/etc/hosts"), ArgValue::Path("/etc/hosts".into()));
    assert_eq!(p("/srv/project/../other/"), ArgValue::Path("/srv/other".into()));

    let e = rejects(&t, json!({"f": "../etc/passwd"}), ErrorCode::InvalidFieldValue, &[]);
    assert_eq!(e.message, r#"field "f": "../etc/passwd" uses `..` to climb above /srv/project; give a path inside it"#);
    for escape in ["..", "a/../..", "a/../../b", "./../x", "a/b/../../../project/x"] {
        rejects(&t, json!({ "f": escape }), ErrorCode::InvalidFieldValue, &["climb above /srv/project"]);
    }
    rejects(&t, json!({"f": "/../etc"}), ErrorCode::InvalidFieldValue, &["climb above /"]);
    rejects(&t, json!({"f": ""}), ErrorCode::InvalidFieldValue, &["is empty; give a path"]);
    rejects(
        &t,
        json!({"f": 5}),
        ErrorCode::InvalidFieldType,
        &["field \"f\" must be a path string, got an integer (5)"],
    );

    let abs = tool(r#"["cat", "{{f}}"]"#, "", r#"f = { type = "path" }"#);
    let e = rejects(&abs, json!({"f": "notes.txt"}), ErrorCode::InvalidFieldValue, &[]);
    assert_eq!(
        e.message,
        r#"field "f": "notes.txt" is relative and this tool has no working directory; give an absolute path"#
    );
    assert_eq!(value(&abs, json!({"f": "/a/./b/../c"}), "f"), ArgValue::Path("/a/c".into()));
}

#[test]
fn paths_are_normalized_without_following_symlinks() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path();
    std::fs::create_dir_all(base.join("real/deep")).unwrap();
    std::os::unix::fs::symlink(base.join("real/deep"), base.join("link")).unwrap();
    let t = tool(
        r#"["cat", "{{f}}"]"#,
        &format!("working_dir = {:?}", base.display().to_string()),
        r#"f = { type = "path" }"#,
    );

    // The symlink component is kept as written.
    assert_eq!(value(&t, json!({"f": "link/file"}), "f"), ArgValue::Path(base.join("link/file")));
    // `..` after a symlink removes the symlink lexically; the kernel would go to real/ instead.
    assert_eq!(value(&t, json!({"f": "link/../x"}), "f"), ArgValue::Path(base.join("x")));
    assert_eq!(std::fs::canonicalize(base.join("link/..")).unwrap(), std::fs::canonicalize(base.join("real")).unwrap());
    // A symlink pointing outside is not an escape lexically (the sandbox governs access).
    std::os::unix::fs::symlink("/etc", base.join("etc-link")).unwrap();
    assert_eq!(value(&t, json!({"f": "etc-link/hosts"}), "f"), ArgValue::Path(base.join("etc-link/hosts")));
    // Nothing needs to exist.
    assert_eq!(value(&t, json!({"f": "missing/x"}), "f"), ArgValue::Path(base.join("missing/x")));
}

// ----- secrets -----

/// A leaked secret shows up as any of these in a message.
const SECRET_MARKERS: &[&str] = &["hunter2", "424242", "4242.5", "../secret"];

#[track_caller]
fn assert_no_secret(e: &ValidationError) {
    for m in SECRET_MARKERS {
        assert!(!e.message.contains(m), "secret value {m:?} echoed in {:?}: {}", e.code, e.message);
    }
}

fn secret_tool() -> Tool {
    tool(
        r#"["login", "{{token}}", "{{plain}}", "{{pin}}", "{{code}}", "{{key}}", "{{amount}}", "{{file}}"]"#,
        r#"working_dir = "/srv""#,
        r#"token = { type = "string", pattern = "[a-f0-9]{8}", secret = true }
plain = { type = "string", secret = true, max_length = 10 }
pin = { type = "integer", min = 0, max = 9999, secret = true }
code = { type = "enum", values = ["alpha", "beta"], secret = true }
key = { type = "boolean", secret = true }
amount = { type = "number", max = 10, secret = true }
file = { type = "path", secret = true }"#,
    )
}

#[test]
fn secret_values_are_not_echoed_in_type_pattern_enum_and_length_errors() {
    let t = secret_tool();
    let cases = [
        (json!({"token": "hunter2-hunter2"}), ErrorCode::InvalidFieldValue, "the value does not match the pattern"),
        (json!({"token": 424242}), ErrorCode::InvalidFieldType, "got an integer"),
        (json!({"plain": "-hunter2"}), ErrorCode::InvalidFieldValue, "the value starts with \"-\""),
        (json!({"plain": "hunter2hunter2"}), ErrorCode::InvalidFieldValue, "is 14 characters long"),
        (json!({"plain": "hunter2\0"}), ErrorCode::InvalidFieldValue, "NUL"),
        (json!({"code": "hunter2"}), ErrorCode::InvalidFieldValue, "the value is not one of the valid values"),
        (json!({"key": "hunter2"}), ErrorCode::InvalidFieldType, "got a string"),
        (json!({"pin": "424242"}), ErrorCode::InvalidFieldType, "got a string"),
        (json!({"pin": 4242.5}), ErrorCode::InvalidFieldType, "got a number"),
        (json!({"amount": "hunter2"}), ErrorCode::InvalidFieldType, "got a string"),
        (json!({"file": 424242}), ErrorCode::InvalidFieldType, "got an integer"),
    ];
    for (args, code, fragment) in cases {
        let e = rejects(&t, args, code, &[fragment]);
        assert_no_secret(&e);
    }
}

/// Range and path errors of a `secret` param say "the value" (or "the path") where a plain
/// param's message quotes what was sent.
#[test]
fn secret_values_are_not_echoed_in_range_and_path_errors() {
    let t = secret_tool();
    let huge: Value = serde_json::from_str("4242424242424242424242").unwrap();
    let cases = [
        (json!({"pin": 424242}), r#"field "pin": the value is above the maximum 9999"#),
        (json!({"pin": -424242}), r#"field "pin": the value is below the minimum 0"#),
        (json!({"pin": 424242.0}), r#"field "pin": the value is above the maximum 9999"#),
        (
            json!({ "pin": huge }),
            r#"field "pin": the value is outside the safe integer range -9007199254740991..=9007199254740991"#,
        ),
        (json!({"amount": 4242.5}), r#"field "amount": the value is above the maximum 10.0"#),
        (
            json!({"file": "../secret/hunter2"}),
            r#"field "file": the path is not acceptable (escapes its base or is relative)"#,
        ),
        (
            json!({"file": "/../secret/hunter2"}),
            r#"field "file": the path is not acceptable (escapes its base or is relative)"#,
        ),
    ];
    for (args, message) in cases {
        let e = rejects(&t, args.clone(), ErrorCode::InvalidFieldValue, &[]);
        assert_eq!(e.message, message, "{args}");
        assert_no_secret(&e);
    }

    // The same values of a plain param are quoted, so the redaction above is the secret flag's doing.
    let plain = tool(
        r#"["login", "{{pin}}", "{{amount}}", "{{file}}"]"#,
        r#"working_dir = "/srv""#,
        r#"pin = { type = "integer", min = 0, max = 9999 }
amount = { type = "number", max = 10 }
file = { type = "path" }"#,
    );
    for (args, message) in [
        (json!({"pin": 424242}), r#"field "pin": 424242 is above the maximum 9999"#),
        (json!({"pin": -424242}), r#"field "pin": -424242 is below the minimum 0"#),
        (json!({"amount": 4242.5}), r#"field "amount": 4242.5 is above the maximum 10.0"#),
        (
            json!({"file": "../secret/hunter2"}),
            r#"field "file": "../secret/hunter2" uses `..` to climb above /srv; give a path inside it"#,
        ),
    ] {
        let e = rejects(&plain, args.clone(), ErrorCode::InvalidFieldValue, &[]);
        assert_eq!(e.message, message, "{args}");
    }
}

// ----- argv planning -----

#[test]
fn values_are_substituted_once_and_never_re_expanded() {
    let t = tool(
        r#"["echo", "{{a}}", "pre-{{b}}-post", "{{b}}{{a}}"]"#,
        "",
        r#"a = { type = "string" }
b = { type = "string" }"#,
    );
    assert_eq!(
        argv(&t, json!({"a": "{{b}}", "b": "{{a}}"})),
        strings(&["echo", "{{b}}", "pre-{{a}}-post", "{{a}}{{b}}"])
    );
    assert_eq!(
        argv(&t, json!({"a": "{{c}}", "b": "{{ b }}"})),
        strings(&["echo", "{{c}}", "pre-{{ b }}-post", "{{ b }}{{c}}"])
    );
}

#[test]
fn an_element_of_an_omitted_param_is_dropped() {
    let t = tool(
        r#"["ls", "-l", "{{dir}}", "--color={{color}}", "--sort={{sort}}", "end"]"#,
        "",
        r#"dir = { type = "path" }
color = { type = "enum", values = ["auto", "never"] }
sort = { type = "enum", values = ["size", "time"], default = "size" }"#,
    );
    assert_eq!(argv(&t, json!({})), strings(&["ls", "-l", "--sort=size", "end"]));
    assert_eq!(
        argv(&t, json!({"color": "never", "dir": "/tmp"})),
        strings(&["ls", "-l", "/tmp", "--color=never", "--sort=size", "end"])
    );
    // A value that happens to be empty-looking is not "omitted".
    let t = tool(
        r#"["echo", "{{n}}", "{{b}}"]"#,
        "",
        r#"n = { type = "integer" }
b = { type = "boolean" }"#,
    );
    assert_eq!(argv(&t, json!({"n": 0, "b": false})), strings(&["echo", "0", "false"]));
}

#[test]
fn an_element_that_is_only_an_empty_string_is_dropped() {
    let t = tool(
        r#"["cargo", "test", "{{filter}}", "--features={{features}}", "{{filter}}{{features}}"]"#,
        "",
        r#"filter = { type = "string", default = "" }
features = { type = "string" }"#,
    );
    // The default "" drops the sole-placeholder element; an element with more text stays.
    assert_eq!(argv(&t, json!({"features": ""})), strings(&["cargo", "test", "--features=", ""]));
    assert_eq!(argv(&t, json!({})), strings(&["cargo", "test"]));
    assert_eq!(
        argv(&t, json!({"filter": "x", "features": "y"})),
        strings(&["cargo", "test", "x", "--features=y", "xy"])
    );
    assert_eq!(argv(&t, json!({"filter": " "})), strings(&["cargo", "test", " "]));
}

#[test]
fn arg_separator_inserts_a_double_dash_once_before_the_first_substituted_element() {
    let t = tool(
        r#"["git", "log", "--oneline", "{{rev}}", "-n", "5", "{{path}}"]"#,
        "arg_separator = true",
        r#"rev = { type = "string", pattern = "[a-z0-9]+" }
path = { type = "string" }"#,
    );
    assert_eq!(
        argv(&t, json!({"rev": "main", "path": "src"})),
        strings(&["git", "log", "--oneline", "--", "main", "-n", "5", "src"])
    );
    assert_eq!(argv(&t, json!({"path": "src"})), strings(&["git", "log", "--oneline", "-n", "5", "--", "src"]));
    // Nothing substituted: no separator.
    assert_eq!(argv(&t, json!({})), strings(&["git", "log", "--oneline", "-n", "5"]));
    let p = plan_for(&t, json!({"rev": "main", "path": "src"}));
    assert_eq!(p.display_argv, p.argv);
    assert_eq!(p.argv.iter().filter(|a| *a == "--").count(), 1);

    // Without arg_separator there is none.
    let t = tool(r#"["git", "log", "{{rev}}"]"#, "", r#"rev = { type = "string" }"#);
    assert_eq!(argv(&t, json!({"rev": "main"})), strings(&["git", "log", "main"]));
}

#[test]
fn option_injection_is_rejected_or_lands_after_the_separator() {
    let plain = tool(r#"["git", "fetch", "{{remote}}"]"#, "", r#"remote = { type = "string" }"#);
    rejects(&plain, json!({"remote": "--upload-pack=x"}), ErrorCode::InvalidFieldValue, &["starts with \"-\""]);

    let open = tool(
        r#"["git", "fetch", "{{remote}}"]"#,
        "arg_separator = true",
        r#"remote = { type = "string", pattern = ".*" }"#,
    );
    assert_eq!(argv(&open, json!({"remote": "--upload-pack=x"})), strings(&["git", "fetch", "--", "--upload-pack=x"]));
}

#[test]
fn a_number_with_an_integral_value_is_substituted_as_an_integer() {
    let t = tool(r#"["sleep", "{{n}}", "n={{n}}"]"#, "", r#"n = { type = "number", min = -100 }"#);
    for (input, shown) in [
        (json!(2), "2"),
        (json!(2.0), "2"),
        (json!(-3.0), "-3"),
        (json!(0.0), "0"),
        (json!(-0.0), "0"),
        (json!(9007199254740991.0), "9007199254740991"),
        (json!(2.5), "2.5"),
        (json!(-0.25), "-0.25"),
    ] {
        assert_eq!(argv(&t, json!({ "n": input })), strings(&["sleep", shown, &format!("n={shown}")]), "{input}");
    }
    // The validated value is still the f64.
    assert_eq!(value(&t, json!({"n": 2}), "n"), ArgValue::Number(2.0));
    assert_eq!(ArgValue::Number(2.0).to_arg(), "2");
    assert_eq!(ArgValue::Number(2.0).to_json(), json!(2.0));
}

#[test]
fn shell_metacharacters_arrive_as_one_argument_byte_for_byte() {
    let t = tool(r#"["echo", "{{s}}", "x={{s}}"]"#, "", r#"s = { type = "string" }"#);
    for v in ["; $(id) | && > *", "`id` 'a' \"b\" \\ $HOME ~ ?", "a b\tc\nd", "naïve ☃ \u{202e}", "*", "$((1+1))"] {
        let a = argv(&t, json!({ "s": v }));
        assert_eq!(a, vec!["echo".to_string(), v.to_string(), format!("x={v}")], "{v:?}");
        assert_eq!(a[1].as_bytes(), v.as_bytes());
    }
}

#[test]
fn the_environment_is_the_clean_base_plus_the_tools_env_plus_exported_params() {
    let t = tool(
        r#"["env"]"#,
        r#"env = { FOO = "bar", LANG = "en_US.UTF-8" }
args_env_prefix = "ARG_"
working_dir = "/srv/w""#,
        r#"name = { type = "string" }
count = { type = "integer" }
ratio = { type = "number" }
whole = { type = "number" }
flag = { type = "boolean" }
mode = { type = "enum", values = ["a b", "c"] }
file = { type = "path" }
quoted = { type = "string", pattern = ".*" }
unset = { type = "string" }
dflt = { type = "integer", default = 7 }"#,
    );
    let p = plan_for(
        &t,
        json!({"name": "hello world", "count": 42, "ratio": 1.5, "whole": 2, "flag": true, "mode": "a b",
               "file": "x/y", "quoted": "\"q\""}),
    );
    let keys: Vec<&str> = p.env.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "PATH",
            "HOME",
            "USER",
            "LANG",
            "TZ",
            "FOO",
            "ARG_NAME",
            "ARG_COUNT",
            "ARG_RATIO",
            "ARG_WHOLE",
            "ARG_FLAG",
            "ARG_MODE",
            "ARG_FILE",
            "ARG_QUOTED",
            "ARG_DFLT"
        ]
    );
    assert_eq!(&keys[..5], BASE_ENV);
    let get = |k: &str| p.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("PATH"), Some(SEARCH_PATH));
    assert_eq!(get("HOME"), Some("/h"));
    assert_eq!(get("USER"), Some("u"));
    assert_eq!(get("LANG"), Some("en_US.UTF-8"), "the tool's env overrides the base value, without a duplicate key");
    assert!(get("TZ").is_some_and(|tz| !tz.is_empty()));
    assert_eq!(get("FOO"), Some("bar"));
    // Strings, enums and paths raw; everything else as JSON.
    assert_eq!(get("ARG_NAME"), Some("hello world"));
    assert_eq!(get("ARG_COUNT"), Some("42"));
    assert_eq!(get("ARG_RATIO"), Some("1.5"));
    // A number param holds an f64, but an integral value is exported as an integer: "2", not "2.0".
    assert_eq!(get("ARG_WHOLE"), Some("2"));
    assert_eq!(get("ARG_FLAG"), Some("true"));
    assert_eq!(get("ARG_MODE"), Some("a b"));
    assert_eq!(get("ARG_FILE"), Some("/srv/w/x/y"));
    assert_eq!(get("ARG_QUOTED"), Some("\"q\""));
    assert_eq!(get("ARG_DFLT"), Some("7"));
    assert_eq!(get("ARG_UNSET"), None);
    assert_eq!(p.cwd, PathBuf::from("/srv/w"));
    assert_eq!(p.argv, strings(&["env"]));
    assert_eq!(p.executable, PathBuf::from("/usr/bin/echo"));

    // No env and no prefix: exactly the base.
    let bare = tool(r#"["env"]"#, "", "");
    let p = plan_for(&bare, json!({}));
    let keys: Vec<&str> = p.env.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, BASE_ENV);
    assert_eq!(p.cwd, PathBuf::from("/"));
}

#[test]
fn secret_values_are_redacted_for_display_but_real_in_argv() {
    let t = tool(
        r#"["curl", "-H", "Authorization: Bearer {{token}}", "{{token}}", "{{url}}"]"#,
        "",
        r#"token = { type = "string", pattern = "[A-Za-z0-9]+", secret = true }
url = { type = "string", pattern = "https://[a-z.]+/" }"#,
    );
    let p = plan_for(&t, json!({"token": "s3cr3t", "url": "https://example.org/"}));
    assert_eq!(p.argv, strings(&["curl", "-H", "Authorization: Bearer s3cr3t", "s3cr3t", "https://example.org/"]));
    assert_eq!(
        p.display_argv,
        strings(&["curl", "-H", &format!("Authorization: Bearer {REDACTED}"), REDACTED, "https://example.org/"])
    );
    assert_eq!(REDACTED, "<redacted>");
    assert!(!p.display_argv.concat().contains("s3cr3t"));
}

// ----- schema agreement -----
//
// The front-end (and any MCP host) validates against `tool.input_schema`; the daemon validates
// with `validate()`. They must agree on accept/reject for every input, with two exceptions the
// schema cannot express because they depend on path arithmetic: a relative path whose `..`
// climbs above the working directory (or an absolute one climbing above `/`), and a relative path
// for a tool without a working directory. The daemon rejects those; the schema accepts them.

fn schema_tools() -> Vec<Tool> {
    vec![
        tool(
            r#"["echo", "{{s}}", "{{p}}", "{{d}}", "{{i}}", "{{u}}", "{{n}}", "{{b}}", "{{e}}", "{{f}}", "{{x}}"]"#,
            r#"working_dir = "/srv/work""#,
            r#"s = { type = "string" }
p = { type = "string", pattern = "[a-z]+", min_length = 2, max_length = 5 }
d = { type = "string", pattern = "[0-9]+|-[0-9]+" }
i = { type = "integer", min = -5, max = 10 }
u = { type = "integer", min = -9007199254740991 }
n = { type = "number", min = 0.5, max = 100 }
b = { type = "boolean" }
e = { type = "enum", values = ["dev", "release", "-i"] }
f = { type = "path", max_length = 20 }
x = { type = "string", pattern = "a|b", default = "a" }"#,
        ),
        tool(
            r#"["echo", "{{name}}", "{{count}}", "{{file}}"]"#,
            "",
            r#"name = { type = "string", required = true, min_length = 1 }
count = { type = "integer", required = true, min = 0 }
file = { type = "path" }"#,
        ),
        tool(r#"["true"]"#, "", ""),
        tool(
            r#"["echo", "{{w}}", "{{digits}}", "{{sp}}", "{{nd}}", "{{nw}}", "{{ns}}", "{{cls}}"]"#,
            "",
            r#"w = { type = "string", pattern = '\w+' }
digits = { type = "string", pattern = '\d+' }
sp = { type = "string", pattern = 'a\sb' }
nd = { type = "string", pattern = '\D+' }
nw = { type = "string", pattern = '\W+' }
ns = { type = "string", pattern = 'a\Sb' }
cls = { type = "string", pattern = '[\d.\s]+' }"#,
        ),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// `validate()` accepts.
    Accept,
    /// `validate()` rejects with this code.
    Reject(ErrorCode),
    /// `validate()` rejects with INVALID_FIELD_VALUE; the schema cannot express the rule.
    PathOnly,
}

use ErrorCode::{
    InvalidFieldType as TYPE, InvalidFieldValue as VALUE, MissingRequiredField as MISSING, UnknownFields as UNKNOWN,
};
use Expect::{Accept, PathOnly, Reject};

fn case_table() -> Vec<(usize, Value, Expect)> {
    let big = |text: &str| -> Value { serde_json::from_str(text).unwrap() };
    vec![
        // tool 0: one param of each type, working_dir /srv/work
        (0, json!({}), Accept),
        (0, json!({"s": "hello"}), Accept),
        (0, json!({"s": ""}), Accept),
        (0, json!({"s": "-x"}), Reject(VALUE)),
        (0, json!({"s": "a-x"}), Accept),
        (0, json!({"s": "a\0b"}), Reject(VALUE)),
        (0, json!({"s": 5}), Reject(TYPE)),
        (0, json!({"s": null}), Reject(TYPE)),
        (0, json!({"s": ["a"]}), Reject(TYPE)),
        (0, json!({"p": "abc"}), Accept),
        (0, json!({"p": "ab"}), Accept),
        (0, json!({"p": "abcde"}), Accept),
        (0, json!({"p": "a"}), Reject(VALUE)),
        (0, json!({"p": "abcdef"}), Reject(VALUE)),
        (0, json!({"p": "abc1"}), Reject(VALUE)),
        (0, json!({"p": "ABC"}), Reject(VALUE)),
        (0, json!({"p": "ab\n"}), Reject(VALUE)),
        (0, json!({"p": ""}), Reject(VALUE)),
        (0, json!({"d": "-12"}), Accept),
        (0, json!({"d": "12-"}), Reject(VALUE)),
        (0, json!({"d": "1|2"}), Reject(VALUE)),
        (0, json!({"i": 5}), Accept),
        (0, json!({"i": 5.0}), Accept),
        (0, json!({"i": -5}), Accept),
        (0, json!({"i": 10}), Accept),
        (0, json!({"i": 10.0}), Accept),
        (0, json!({"i": -6}), Reject(VALUE)),
        (0, json!({"i": 11}), Reject(VALUE)),
        (0, json!({"i": 5.5}), Reject(TYPE)),
        (0, json!({"i": "5"}), Reject(TYPE)),
        (0, json!({"i": true}), Reject(TYPE)),
        (0, json!({"i": null}), Reject(TYPE)),
        // Integers without bounds: the JSON safe-integer range, ±(2^53 - 1), on both sides.
        (0, json!({ "u": MAX_SAFE_INTEGER }), Accept),
        (0, json!({ "u": -MAX_SAFE_INTEGER }), Accept),
        (0, json!({ "u": 9_007_199_254_740_991.0_f64 }), Accept),
        (0, json!({ "u": -9_007_199_254_740_991.0_f64 }), Accept),
        (0, json!({ "u": MAX_SAFE_INTEGER + 1 }), Reject(VALUE)),
        (0, json!({ "u": -MAX_SAFE_INTEGER - 1 }), Reject(VALUE)),
        (0, json!({ "u": 9_007_199_254_740_992.0_f64 }), Reject(VALUE)),
        (0, json!({ "u": -9_007_199_254_740_992.0_f64 }), Reject(VALUE)),
        (0, json!({ "u": i64::MAX }), Reject(VALUE)),
        (0, json!({ "u": i64::MIN }), Reject(VALUE)),
        (0, json!({ "u": big("9223372036854775808") }), Reject(VALUE)),
        (0, json!({ "u": big("9223372036854775808.0") }), Reject(VALUE)),
        (0, json!({ "u": big("-9223372036854775808.0") }), Reject(VALUE)),
        // serde_json reads an integer below i64::MIN as the f64 -2^63; it is not clamped to i64::MIN.
        (0, json!({ "u": big("-9223372036854775809") }), Reject(VALUE)),
        (0, json!({ "u": big("1e300") }), Reject(VALUE)),
        (0, json!({ "u": u64::MAX }), Reject(VALUE)),
        (0, json!({ "u": 0.5 }), Reject(TYPE)),
        (0, json!({"n": 0.5}), Accept),
        (0, json!({"n": 100}), Accept),
        (0, json!({"n": 50}), Accept),
        (0, json!({"n": 0.4999}), Reject(VALUE)),
        (0, json!({"n": 100.01}), Reject(VALUE)),
        (0, json!({"n": "1"}), Reject(TYPE)),
        (0, json!({"b": true}), Accept),
        (0, json!({"b": "true"}), Reject(TYPE)),
        (0, json!({"b": 0}), Reject(TYPE)),
        (0, json!({"e": "dev"}), Accept),
        (0, json!({"e": "-i"}), Accept),
        (0, json!({"e": "Dev"}), Reject(VALUE)),
        (0, json!({"e": 1}), Reject(TYPE)),
        (0, json!({"f": "src/x"}), Accept),
        (0, json!({"f": "/etc/hosts"}), Accept),
        (0, json!({"f": "."}), Accept),
        (0, json!({"f": "-rf"}), Accept),
        (0, json!({"f": ""}), Reject(VALUE)),
        (0, json!({"f": "a\0"}), Reject(VALUE)),
        (0, json!({"f": "abcdefghijklmnopqrstu"}), Reject(VALUE)),
        (0, json!({"f": 1}), Reject(TYPE)),
        (0, json!({"f": "../x"}), PathOnly),
        (0, json!({"f": "a/../../x"}), PathOnly),
        (0, json!({"f": "/.."}), PathOnly),
        (0, json!({"x": "b"}), Accept),
        (0, json!({"x": "ab"}), Reject(VALUE)),
        (0, json!({"zzz": 1}), Reject(UNKNOWN)),
        (0, json!({"s": "ok", "S": "extra"}), Reject(UNKNOWN)),
        (0, json!([]), Reject(TYPE)),
        (0, json!(null), Reject(TYPE)),
        (0, json!("s"), Reject(TYPE)),
        // tool 1: required fields, no working_dir
        (1, json!({"name": "a", "count": 0}), Accept),
        (1, json!({"name": "a", "count": 0, "file": "/x"}), Accept),
        (1, json!({"name": "a"}), Reject(MISSING)),
        (1, json!({"count": 1}), Reject(MISSING)),
        (1, json!({}), Reject(MISSING)),
        (1, json!({"name": "", "count": 1}), Reject(VALUE)),
        (1, json!({"name": "a", "count": -1}), Reject(VALUE)),
        (1, json!({"name": "a", "count": null}), Reject(TYPE)),
        (1, json!({"name": null, "count": 1}), Reject(TYPE)),
        (1, json!({"name": "a", "count": 1, "file": "rel"}), PathOnly),
        // tool 2: no params
        (2, json!({}), Accept),
        (2, json!({"a": null}), Reject(UNKNOWN)),
        // tool 3: shorthand classes, which both sides read as the same explicit ASCII classes
        (3, json!({"w": "abc_1"}), Accept),
        (3, json!({"w": "ABC_z9"}), Accept),
        (3, json!({"digits": "123"}), Accept),
        (3, json!({"w": "a-b"}), Reject(VALUE)),
        (3, json!({"sp": "a b"}), Accept),
        (3, json!({"sp": "a\tb"}), Accept),
        (3, json!({"sp": "a\nb"}), Accept),
        (3, json!({"sp": "a\rb"}), Accept),
        (3, json!({"sp": "a\u{b}b"}), Accept),
        (3, json!({"sp": "a\u{c}b"}), Accept),
        (3, json!({"sp": "ab"}), Reject(VALUE)),
        // Non-ASCII digits, letters and spaces were matched by the daemon's Unicode classes and not by
        // the schema's ECMA-262 ones; now neither side matches them.
        (3, json!({"digits": "١٢٣"}), Reject(VALUE)),
        (3, json!({"digits": "１２３"}), Reject(VALUE)),
        (3, json!({"w": "é"}), Reject(VALUE)),
        (3, json!({"w": "日本"}), Reject(VALUE)),
        (3, json!({"sp": "a\u{3000}b"}), Reject(VALUE)),
        (3, json!({"sp": "a\u{a0}b"}), Reject(VALUE)),
        (3, json!({"sp": "a\u{2028}b"}), Reject(VALUE)),
        (3, json!({"sp": "a\u{feff}b"}), Reject(VALUE)),
        // The negated classes are the exact complements, so the same characters land on the other side.
        (3, json!({"nd": "abc"}), Accept),
        (3, json!({"nd": "١٢٣"}), Accept),
        (3, json!({"nd": "a1"}), Reject(VALUE)),
        (3, json!({"nw": "é-日"}), Accept),
        (3, json!({"nw": "-_"}), Reject(VALUE)),
        (3, json!({"ns": "a\u{3000}b"}), Accept),
        (3, json!({"ns": "a\u{a0}b"}), Accept),
        (3, json!({"ns": "axb"}), Accept),
        (3, json!({"ns": "a b"}), Reject(VALUE)),
        (3, json!({"ns": "a\u{b}b"}), Reject(VALUE)),
        // Inside a class.
        (3, json!({"cls": "1.5 2"}), Accept),
        (3, json!({"cls": "1\t2"}), Accept),
        (3, json!({"cls": "١.٥"}), Reject(VALUE)),
        (3, json!({"cls": "1\u{3000}2"}), Reject(VALUE)),
        (3, json!({"cls": "1,5"}), Reject(VALUE)),
    ]
}

fn schema_validators(tools: &[Tool]) -> Vec<jsonschema::Validator> {
    tools
        .iter()
        .map(|t| {
            let s = t.input_schema.value();
            assert_eq!(s["$schema"], schema::DRAFT);
            assert!(jsonschema::draft202012::meta::is_valid(&s), "{s}");
            jsonschema::draft202012::new(&s).unwrap_or_else(|e| panic!("{}: {e}\n{s}", t.name))
        })
        .collect()
}

#[test]
fn the_schema_and_validate_agree_on_a_table_of_inputs() {
    let tools = schema_tools();
    let validators = schema_validators(&tools);
    let mut failures = Vec::new();
    let table = case_table();
    assert!(table.len() >= 60);
    for (i, (tool_index, input, expect)) in table.iter().enumerate() {
        let t = &tools[*tool_index];
        let by_schema = validators[*tool_index].is_valid(input);
        let by_validate = validate(t, input);
        let problem = match (expect, &by_validate) {
            (Accept, Ok(_)) if by_schema => None,
            (Reject(code), Err(e)) if e.code == *code && !by_schema => None,
            (PathOnly, Err(e)) if e.code == VALUE && by_schema => None,
            _ => Some(format!(
                "case {i}: tool {} input {input}: expected {expect:?}; validate() -> {:?}, schema valid -> {by_schema}",
                *tool_index,
                by_validate.as_ref().map(|_| "ok").map_err(|e| e.to_string())
            )),
        };
        failures.extend(problem);
    }
    assert!(failures.is_empty(), "{} disagreement(s):\n{}", failures.len(), failures.join("\n"));
}

/// Every param of tools 0 and 3 against a pool of values: the two validators must agree on each.
#[test]
fn the_schema_and_validate_agree_on_a_sweep_of_values() {
    let tools = schema_tools();
    let validators = schema_validators(&tools);
    let pool: Vec<Value> = [
        "null",
        "true",
        "false",
        "0",
        "-0",
        "1",
        "-1",
        "5",
        "5.0",
        "5.5",
        "-5",
        "-6",
        "10",
        "11",
        "0.5",
        "0.49",
        "100",
        "100.5",
        "1e2",
        "1e300",
        "-1e300",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "18446744073709551615",
        "-9223372036854775809",
        "9007199254740991",
        "-9007199254740991",
        "9007199254740992",
        "-9007199254740992",
        "9.007199254740991e15",
        "9007199254740992.0",
        "1e-7",
        "\"\"",
        "\"a\"",
        "\"ab\"",
        "\"abc\"",
        "\"abcdef\"",
        "\"ABC\"",
        "\"-\"",
        "\"-x\"",
        "\"--x=1\"",
        "\"x-\"",
        "\"5\"",
        "\"true\"",
        "\"null\"",
        "\"dev\"",
        "\"release\"",
        "\"-i\"",
        "\"a\\u0000\"",
        "\"\\u0000\"",
        "\"a\\nb\"",
        "\"ab\\n\"",
        "\"/abs/path\"",
        "\"rel/path\"",
        "\".\"",
        "\"./x\"",
        "\"/\"",
        "\"//\"",
        "\"éé\"",
        "\"日本\"",
        "\"a|b\"",
        "\"12\"",
        "\"-12\"",
        "[]",
        "[1]",
        "{}",
        "{\"a\":1}",
        "\"abcdefghijklmnopqrstuvwxyz\"",
        "\"abc_1\"",
        "\"a b\"",
        "\"a\\tb\"",
        "\"a\\u000bb\"",
        "\"a\\u00a0b\"",
        "\"a\\u3000b\"",
        "\"axb\"",
        "\"1.5 2\"",
        "\"\\u0661\\u0662\\u0663\"",
        "\"\\uff11\"",
        "\"\\u00e9\"",
    ]
    .iter()
    .map(|s| serde_json::from_str(s).unwrap_or_else(|e| panic!("{s}: {e}")))
    .collect();
    let mut failures = Vec::new();
    let mut checked = 0;
    for (t, validator) in [(&tools[0], &validators[0]), (&tools[3], &validators[3])] {
        for p in &t.params {
            for v in &pool {
                let input = json!({ p.name.clone(): v });
                let by_schema = validator.is_valid(&input);
                let by_validate = validate(t, &input);
                let path_only = matches!(&by_validate,
                    Err(e) if e.message.contains("climb above") || e.message.contains("no working directory"));
                if path_only && by_schema {
                    continue;
                }
                checked += 1;
                if by_schema != by_validate.is_ok() {
                    failures.push(format!(
                        "input {input}: schema valid -> {by_schema}, validate() -> {:?}",
                        by_validate.map(|_| "ok").map_err(|e| e.to_string())
                    ));
                }
            }
        }
    }
    assert!(checked > 1000, "{checked}");
    assert!(failures.is_empty(), "{} disagreement(s):\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn the_schema_says_what_the_policy_says() {
    let tools = schema_tools();
    let s = &tools[1].input_schema.value();
    assert_eq!(s["type"], "object");
    assert_eq!(s["additionalProperties"], false);
    assert_eq!(s["required"], json!(["name", "count"]));
    assert_eq!(s["properties"]["count"]["type"], "integer");
    assert_eq!(s["properties"]["count"]["minimum"], 0);
    // Without an explicit bound the schema states the safe-integer limit, as validate() applies it.
    assert_eq!(s["properties"]["count"]["maximum"], json!(MAX_SAFE_INTEGER));
    assert_eq!(s["properties"]["file"]["description"], "a path (must be absolute)");
    let s = &tools[0].input_schema.value();
    assert_eq!(s["required"], json!([]));
    assert_eq!(s["properties"]["x"]["default"], "a");
    assert_eq!(s["properties"]["e"]["enum"], json!(["dev", "release", "-i"]));
    assert_eq!(s["properties"]["f"]["description"], "a path (relative paths are taken from /srv/work)");
    assert_eq!(s["properties"]["p"]["pattern"], "^(?:[a-z]+)$");
    assert_eq!(s["properties"]["i"]["minimum"], -5);
    assert_eq!(s["properties"]["i"]["maximum"], 10);
    assert_eq!(s["properties"]["u"]["minimum"], json!(-MAX_SAFE_INTEGER));
    assert_eq!(s["properties"]["u"]["maximum"], json!(MAX_SAFE_INTEGER));
    assert_eq!(s["properties"]["u"]["maximum"], json!(9_007_199_254_740_991_i64));
    // Shorthand classes are published spelled out, exactly as the daemon's own regex reads them.
    let s = &tools[3].input_schema.value();
    for (name, pattern) in [
        ("w", "^(?:[0-9A-Za-z_]+)$"),
        ("digits", "^(?:[0-9]+)$"),
        ("sp", r"^(?:a[\t\n\x0B\f\r ]b)$"),
        ("nd", "^(?:[^0-9]+)$"),
        ("nw", "^(?:[^0-9A-Za-z_]+)$"),
        ("ns", r"^(?:a[^\t\n\x0B\f\r ]b)$"),
        ("cls", r"^(?:[0-9.\t\n\x0B\f\r ]+)$"),
    ] {
        assert_eq!(s["properties"][name]["pattern"], pattern, "{name}");
    }
    // Messages still quote the pattern as the policy wrote it.
    let e = rejects(&tools[3], json!({"digits": "x"}), ErrorCode::InvalidFieldValue, &[]);
    assert_eq!(e.message, r#"field "digits": "x" does not match the pattern \d+"#);
}

#[test]
fn integer_bounds_at_the_safe_limit_load_and_reach_the_schema() {
    let t = tool(
        r#"["echo", "{{a}}"]"#,
        "",
        r#"a = { type = "integer", min = -9007199254740991, max = 9007199254740991, default = 9007199254740991 }"#,
    );
    let s = t.input_schema.value();
    assert_eq!(s["properties"]["a"]["minimum"], json!(-MAX_SAFE_INTEGER));
    assert_eq!(s["properties"]["a"]["maximum"], json!(MAX_SAFE_INTEGER));
    assert_eq!(value(&t, json!({}), "a"), ArgValue::Integer(MAX_SAFE_INTEGER));
    assert_eq!(argv(&t, json!({})), strings(&["echo", "9007199254740991"]));
}

/// `-9223372036854775809` (one below i64::MIN, written as a JSON integer) reaches the validator as
/// the f64 -2^63 (serde_json has no `arbitrary_precision` here); it must be rejected like
/// `9223372036854775808`, not clamped to i64::MIN.
#[test]
fn an_integer_literal_below_the_64_bit_range_is_rejected() {
    let t = tool(r#"["echo", "{{u}}"]"#, "", r#"u = { type = "integer" }"#);
    for text in [r#"{"u": -9223372036854775809}"#, r#"{"u": 9223372036854775808}"#] {
        let e = rejects(&t, parse_arguments(text).unwrap(), ErrorCode::InvalidFieldValue, &[]);
        assert_eq!(e.field.as_deref(), Some("u"));
        assert!(e.message.starts_with("field \"u\": "), "{}", e.message);
        assert!(
            e.message.ends_with(" is outside the safe integer range -9007199254740991..=9007199254740991"),
            "{text}: {}",
            e.message
        );
    }
}
