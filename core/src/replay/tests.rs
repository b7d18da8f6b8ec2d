//! Each flip kind decided from a record, with the loader and validation cordond uses.

use super::*;
use crate::policy::{Host, load_sources};

const BASE: &str = r#"version = 1
[tools.greet]
description = "d"
reason = "r"
command = ["/bin/echo", "{{name}}", "{{token}}"]
allow = { users = [1000, "ann"], groups = ["staff"] }
[tools.greet.params.name]
type = "string"
pattern = "^[a-z]+$"
[tools.greet.params.token]
type = "string"
secret = true
required = false
"#;

fn set(text: &str) -> PolicySet {
    load_sources(&[("t.toml".into(), text.to_string())], &Host::new(true, 7)).unwrap_or_else(|e| panic!("{e}"))
}

fn gid(name: &str) -> Option<u32> {
    (name == "staff").then_some(50)
}

fn started(uid: u64, args: &str, extra: Value) -> Value {
    let mut v = json!({
        "seq": 7, "time": "2026-11-28T10:00:00.000000Z", "decision": "started", "id": "i1", "tool": "greet",
        "caller": { "uid": uid, "gid": 100 }, "role": if uid == 0 { "admin" } else { "agent" },
        "arguments": args, "argv": ["/bin/echo", "bob"], "run_as": { "uid": uid },
    });
    if let (Value::Object(m), Value::Object(e)) = (&mut v, extra) {
        m.extend(e);
    }
    v
}

fn replay(policy: &str, records: &[Value]) -> Report {
    let set = set(policy);
    let mut r = Replayer::new(&set, &gid);
    for v in records {
        r.feed(v);
    }
    r.finish()
}

fn counts(r: &Report) -> Vec<(&'static str, u64)> {
    r.flip_counts().into_iter().map(|(k, n)| (k.as_str(), n)).collect()
}

#[test]
fn the_same_policy_flips_nothing() {
    let r = replay(BASE, &[started(1000, r#"{"name":"bob"}"#, json!({}))]);
    assert_eq!((r.calls, r.replayed, counts(&r)), (1, 1, vec![]));
}

#[test]
fn a_removed_user_refuses_what_was_allowed_and_an_admin_stays_allowed() {
    let narrowed = BASE.replace(r#"users = [1000, "ann"], groups = ["staff"]"#, r#"users = ["ann"]"#);
    let recs =
        [started(1000, r#"{"name":"bob"}"#, json!({ "user": "carl" })), started(0, r#"{"name":"bob"}"#, json!({}))];
    let r = replay(&narrowed, &recs);
    assert_eq!(counts(&r), vec![("allowed_now_refused", 1)]);
    // The name decides when recorded; without it, the call is not replayable.
    let r = replay(&narrowed, &[started(1000, r#"{"name":"bob"}"#, json!({}))]);
    assert_eq!(
        r.not_replayable_counts().into_iter().map(|(k, n)| (k.as_str(), n)).collect::<Vec<_>>(),
        vec![("no_caller_evidence", 1)]
    );
}

#[test]
fn groups_decide_from_the_recorded_gids() {
    let by_group = BASE.replace(r#"users = [1000, "ann"], groups = ["staff"]"#, r#"groups = ["staff"]"#);
    let rec = started(1001, r#"{"name":"bob"}"#, json!({ "user": "dan", "groups": [100, 50] }));
    assert_eq!(counts(&replay(&by_group, std::slice::from_ref(&rec))), vec![]);
    let rec = started(1001, r#"{"name":"bob"}"#, json!({ "user": "dan", "groups": [100] }));
    assert_eq!(counts(&replay(&by_group, &[rec])), vec![("allowed_now_refused", 1)]);
    // A record that kept only some of the caller's groups cannot tell a refusal.
    let rec = started(1001, r#"{"name":"bob"}"#, json!({ "user": "dan", "groups": [100], "groups_total": 300 }));
    let r = replay(&by_group, &[rec]);
    assert_eq!((counts(&r), r.not_replayable_counts().get(&Reason::NoCallerEvidence).copied()), (vec![], Some(1)));
}

#[test]
fn a_narrowed_pattern_names_the_code_and_field() {
    let narrowed = BASE.replace(r#"pattern = "^[a-z]+$""#, r#"pattern = "^[a-c]+$""#);
    let r = replay(&narrowed, &[started(1000, r#"{"name":"dog"}"#, json!({}))]);
    assert_eq!(counts(&r), vec![("allowed_now_refused", 1)]);
    let g = r.flips.values().next().unwrap();
    assert!(g.example.new.contains("INVALID_FIELD_VALUE, field name"), "{:?}", g.example);
}

#[test]
fn an_invalid_call_the_candidate_accepts_is_refused_now_allowed() {
    let widened = BASE.replace(r#"pattern = "^[a-z]+$""#, r#"pattern = "^[a-z0-9]+$""#);
    let invalid = json!({ "seq": 3, "time": "t", "decision": "invalid", "tool": "greet", "code": "INVALID_FIELD_VALUE",
        "field": "name", "caller": { "uid": 1000, "gid": 100 }, "role": "agent", "arguments": r#"{"name":"b0b"}"# });
    assert_eq!(counts(&replay(&widened, std::slice::from_ref(&invalid))), vec![("refused_now_allowed", 1)]);
    assert_eq!(counts(&replay(BASE, &[invalid])), vec![]);
}

#[test]
fn a_confirmation_added_or_dropped_and_a_confirmed_call_counted_once() {
    let confirmed = BASE.replace("command = [", "confirm = \"agent\"\ncommand = [");
    assert_eq!(
        counts(&replay(&confirmed, &[started(1000, r#"{"name":"bob"}"#, json!({}))])),
        vec![("confirmation_added", 1)]
    );
    let requested = json!({ "seq": 5, "time": "t", "decision": "confirmation_requested", "tool": "greet", "mode": "agent",
        "approval_id": "a1", "caller": { "uid": 1000, "gid": 100 }, "role": "agent", "arguments": r#"{"name":"bob"}"#,
        "argv": ["/bin/echo", "bob"] });
    let then =
        started(1000, r#"{"name":"bob"}"#, json!({ "confirmation": { "approval_id": "a1", "via": "agent_token" } }));
    let r = replay(BASE, &[requested, then]);
    assert_eq!((r.calls, counts(&r)), (1, vec![("confirmation_dropped", 1)]));
}

#[test]
fn a_changed_argv_is_found_also_from_a_clipped_records_sha256() {
    let changed = BASE
        .replace(r#"command = ["/bin/echo", "{{name}}", "{{token}}"]"#, r#"command = ["/bin/echo", "-n", "{name}"]"#);
    assert_eq!(counts(&replay(&changed, &[started(1000, r#"{"name":"bob"}"#, json!({}))])), vec![("argv_changed", 1)]);
    let sha = crate::audit::argv_sha256(&["/bin/echo".into(), "bob".into()]);
    let clipped =
        started(1000, r#"{"name":"bob"}"#, json!({ "argv": ["/bin/echo"], "argv_clipped": { "sha256": sha } }));
    assert_eq!(counts(&replay(BASE, std::slice::from_ref(&clipped))), vec![]);
    assert_eq!(counts(&replay(&changed, &[clipped])), vec![("argv_changed", 1)]);
}

#[test]
fn what_a_record_cannot_tell_is_not_replayable_and_secrets_never_reach_the_report() {
    let recs = [
        started(1000, r#"{"name":"bob","token":"<redacted>"}"#, json!({})),
        started(1000, "", json!({ "arguments": { "prefix": "{\"name\":\"", "bytes": 9000 } })),
        json!({ "seq": 1, "time": "t", "decision": "started", "tool": "greet", "caller": { "uid": 1000 }, "argv": [] }),
    ];
    let r = replay(BASE, &recs);
    let reasons: Vec<_> = r.not_replayable_counts().into_iter().map(|(k, n)| (k.as_str(), n)).collect();
    assert_eq!(reasons, vec![("no_arguments", 1), ("clipped_arguments", 1), ("redacted_secret", 1)]);
    // A param the candidate marks secret (not the recorded policy) is redacted in the report too,
    // in its arguments and every text.
    let secret_name = BASE.replace("pattern = \"^[a-z]+$\"", "pattern = \"^[a-c]+$\"\nsecret = true");
    let r = replay(&secret_name, &[started(1000, r#"{"name":"hunter"}"#, json!({}))]);
    let text = r.json().to_string();
    assert!(!text.contains("hunter"), "{text}");
    assert_eq!(r.not_replayable_counts().len() + r.flip_counts().len(), 1, "{text}");
}

#[test]
fn a_removed_tool_refuses_and_egress_is_decided_by_the_candidates_hosts() {
    let other = BASE.replace("[tools.greet", "[tools.other");
    assert_eq!(
        counts(&replay(&other, &[started(1000, r#"{"name":"bob"}"#, json!({}))])),
        vec![("allowed_now_refused", 1)]
    );
    let net = BASE.replace("command = [", "network = { hosts = [\"api.example.com:443\"] }\ncommand = [");
    let egress = |host: &str, allowed: bool| {
        json!({ "seq": 9, "time": "t", "decision": "egress", "id": "i1", "tool": "greet", "host": host, "port": 443,
            "allowed": allowed, "why": if allowed { Value::Null } else { json!("not-listed") } })
    };
    let recs = [
        started(1000, r#"{"name":"bob"}"#, json!({})),
        egress("api.example.com", true),
        egress("evil.example.com", false),
    ];
    assert_eq!(counts(&replay(&net, &recs)), vec![]);
    let r = replay(BASE, &recs);
    assert_eq!((r.egress, counts(&r)), (2, vec![("egress_now_refused", 1)]));
    let wide = net.replace("api.example.com:443", "*.example.com:443");
    let r = replay(&wide, &recs);
    assert_eq!(counts(&r), vec![("egress_now_allowed", 1)]);
    assert_eq!(r.flips.keys().next().unwrap().1.uid, Some(1000), "an egress record's caller is its invocation's");
}

#[test]
fn a_denial_the_candidate_grants_is_denial_now_granted() {
    let finished = json!({ "seq": 8, "time": "t", "decision": "finished", "id": "i1", "tool": "greet", "exit_code": 1,
        "denials": [
            { "source": "landlock", "target": "/srv/data/x.txt", "access": "read_file", "grant_key": "read", "message": "landlock denied read_file on /srv/data/x.txt" },
            { "source": "landlock", "target": "/srv/repo/.git/hooks/pre-commit", "access": "write_file", "grant_key": "write", "message": "m" },
            { "source": "inferred", "target": "/srv/data/y", "access": "read", "grant_key": "read", "message": "m" },
        ] });
    let recs = [started(1000, r#"{"name":"bob"}"#, json!({})), finished];
    assert_eq!(counts(&replay(BASE, &recs)), vec![]);
    let granted = BASE.replace("command = [", "read = [\"/srv/data\"]\nwrite = [\"/srv/repo\"]\ncommand = [");
    let r = replay(&granted, &recs);
    // Only the exact read denial: the .git write stays protected, the inferred one is unverified.
    assert_eq!(counts(&r), vec![("denial_now_granted", 1)]);
    assert_eq!(r.flips.keys().next().unwrap().1.uid, Some(1000));
}

#[test]
fn a_path_argument_no_grant_covers_is_grant_removed() {
    let tool = |grant: &str| {
        format!(
            "version = 1\n[tools.cat]\ndescription = \"d\"\nreason = \"r\"\ncommand = [\"/bin/cat\", \"{{{{file}}}}\"]\n{grant}\n[tools.cat.params.file]\ntype = \"path\"\n"
        )
    };
    let call = |file: &str| {
        let mut v = started(0, &format!(r#"{{"file":"{file}"}}"#), json!({ "tool": "cat" }));
        v["argv"] = json!(["/bin/cat", file]);
        v
    };
    let recs = [call("/srv/data/a.txt"), call("/srv/data/sub/b.txt"), call("/srv/other")];
    let granted = tool("read = [\"/srv/data\", \"/srv/other\"]");
    assert_eq!(counts(&replay(&granted, &recs)), vec![]);
    // The read grant of /srv/other removed: that call only.
    let r = replay(&tool("read = [\"/srv/data\"]"), &recs);
    assert_eq!(counts(&r), vec![("grant_removed", 1)]);
    let group = r.flips.values().next().unwrap();
    assert!(group.example.why.contains("param \"file\": /srv/other is inside no `read`"), "{}", group.example.why);
    // A write or exec grant covers too; a deny carve-out takes a path (and what is under it) out.
    assert_eq!(counts(&replay(&tool("write = [\"/srv\"]"), &recs)), vec![]);
    let carved = tool("read = [{ path = \"/srv\", deny = [\"data/sub\"] }]");
    assert_eq!(counts(&replay(&carved, &recs)), vec![("grant_removed", 1)]);
    // A dry run or a refused call is no call that ran.
    let mut dry = call("/srv/other");
    dry["decision"] = json!("dry_run");
    assert_eq!(counts(&replay(&tool(""), &[dry])), vec![]);
}
