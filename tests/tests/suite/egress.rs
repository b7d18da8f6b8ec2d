//! Network access by host name (issue 16) through the real daemon and sandbox: a tool with
//! `network.hosts` runs in a network namespace of its own, and curl inside it reaches an
//! upstream HTTP server on the host's 127.0.0.1 only through cordond's egress proxy. Every
//! server here is on 127.0.0.1, granted explicitly; nothing leaves the machine.

use std::path::Path;

use cordon_tests::Daemon;
use serde_json::{Value, json};

const CURL: &str = "/usr/bin/curl";

use cordon_tests::hello_upstream as upstream;

fn q(s: impl AsRef<Path>) -> String {
    serde_json::to_string(s.as_ref().to_str().unwrap()).unwrap()
}

/// `fetch` runs curl on a URL (through the proxy its environment names); `tunnel` the same with
/// `--proxytunnel` (HTTP CONNECT), `socks` through SOCKS5; all with `hosts`.
fn daemon(hosts: &str) -> Daemon {
    let policy = format!(
        r#"version = 1

[defaults]
timeout = "20s"
network = {{ hosts = [{hosts}] }}

[tools.fetch]
description = "fetches a URL"
reason = "egress tests"
command = [{curl}, "-sS", "--max-time", "10", "{{{{url}}}}"]

[tools.fetch.params.url]
type = "string"
pattern = "http://[^\\x00 ]+"
required = true

[tools.tunnel]
description = "fetches a URL through an HTTP CONNECT tunnel"
reason = "egress tests"
command = [{curl}, "-sS", "--max-time", "10", "--proxytunnel", "{{{{url}}}}"]

[tools.tunnel.params.url]
type = "string"
pattern = "http://[^\\x00 ]+"
required = true

[tools.socks]
description = "fetches a URL through SOCKS5, names resolved by the proxy"
reason = "egress tests"
command = [{curl}, "-sS", "--max-time", "10", "-x", "socks5h://127.0.0.1:3128", "{{{{url}}}}"]

[tools.socks.params.url]
type = "string"
pattern = "http://[^\\x00 ]+"
required = true
"#,
        curl = q(CURL)
    );
    Daemon::start(&[("egress.toml", &policy)])
}

fn usable() -> bool {
    if !cordon_tests::is_root() {
        cordon_tests::skip!(cordon_tests::Skip::NotRoot, "a network namespace per tool");
        return false;
    }
    if !Path::new(CURL).exists() {
        cordon_tests::skip!(cordon_tests::Skip::MissingTool(CURL), "the tools run {CURL}");
        return false;
    }
    true
}

fn fetch(d: &Daemon, tool: &str, url: &str) -> Value {
    let (out, result) = d.run_json(tool, &json!({ "url": url }));
    assert!(result.get("error").is_none() || result["error"].get("code").is_some(), "{out:?}");
    result
}

fn records_of(d: &Daemon, id: &str) -> Vec<Value> {
    d.audit_records().into_iter().filter(|r| r["id"] == id).collect()
}

#[test]
fn curl_reaches_a_granted_host_through_the_proxy_and_each_connection_is_recorded() {
    if !usable() {
        return;
    }
    let port = upstream();
    let d = daemon(&format!("\"127.0.0.1:{port}\", \"localhost:{port}\""));
    for (tool, url, protocol) in [
        ("fetch", format!("http://127.0.0.1:{port}/a"), "http"),
        ("fetch", format!("http://localhost:{port}/b"), "http"),
        ("tunnel", format!("http://localhost:{port}/c"), "connect"),
        ("socks", format!("http://localhost:{port}/d"), "socks5"),
    ] {
        let r = fetch(&d, tool, &url);
        assert_eq!(
            (r["exit_code"].as_i64(), r["stdout"].as_str()),
            (Some(0), Some("hello from upstream\n")),
            "{url}: {r:#}"
        );
        assert!(r.get("denials").is_none_or(|d| d.as_array().is_some_and(Vec::is_empty)), "{r:#}");
        let id = r["invocation_id"].as_str().unwrap();
        let records = records_of(&d, id);
        let decisions: Vec<&str> = records.iter().map(|r| r["decision"].as_str().unwrap()).collect();
        assert_eq!(decisions, ["started", "egress", "egress_closed", "finished"], "{records:#?}");
        assert_eq!((&records[1]["allowed"], &records[1]["protocol"]), (&json!(true), &json!(protocol)));
        assert_eq!(records[1]["addresses"], json!(["127.0.0.1"]), "{url}: ::1 is not granted");
        assert_eq!(records[2]["address"], json!(format!("127.0.0.1:{port}")));
        let summary = &records[3]["egress"];
        assert_eq!((&summary["connections"], &summary["refused"]), (&json!(1), &json!(0)), "{summary}");
        assert!(summary["bytes_down"].as_u64().unwrap() > 20, "{summary}");
    }
}

#[test]
fn a_host_not_listed_gets_403_and_the_agent_sees_the_refusal_even_when_the_tool_exits_0() {
    if !usable() {
        return;
    }
    let port = upstream();
    // localhost alone: a name that resolves to loopback needs the address itself granted.
    let d = daemon(&format!("\"localhost:{port}\""));
    let r = fetch(&d, "fetch", "http://evil.example/x");
    assert_eq!(r["exit_code"].as_i64(), Some(0), "curl prints the 403 page and succeeds: {r:#}");
    assert!(
        r["stdout"].as_str().unwrap().starts_with(
            "cordon: the egress proxy refused evil.example:80 for tool fetch: evil.example:80 is not in the tool's \
             network.hosts"
        ),
        "{r:#}"
    );
    let denial = &r["denials"][0];
    assert_eq!(
        (&denial["source"], &denial["target"], &denial["grant_key"]),
        (&json!("proxy"), &json!("evil.example:80"), &json!("hosts")),
        "{r:#}"
    );
    assert!(denial["message"].as_str().unwrap().contains("only if the tool should reach it at all"), "{denial}");
    let id = r["invocation_id"].as_str().unwrap();
    let records = records_of(&d, id);
    let refused = records.iter().find(|r| r["decision"] == "egress").unwrap();
    assert_eq!(
        (&refused["allowed"], &refused["why"], &refused["host"]),
        (&json!(false), &json!("not-listed"), &json!("evil.example"))
    );
    let finished = records.iter().find(|r| r["decision"] == "finished").unwrap();
    assert_eq!(finished["egress"]["refused"], 1);
    assert_eq!(finished["denials"][0]["source"], "proxy");

    let r = fetch(&d, "fetch", &format!("http://localhost:{port}/"));
    let denial = &r["denials"][0];
    assert_eq!(
        (&denial["target"], &denial["access"]),
        (&json!(format!("localhost:{port}")), &json!(["special-address"])),
        "{r:#}"
    );
    assert!(denial["message"].as_str().unwrap().contains(", a loopback address;"), "{denial}");
}

/// A plain-HTTP loopback host with `read_only = true` (issue 30): GET goes through, POST is
/// answered 403 by the proxy inside the sandbox's network, recorded with its method, host and
/// path before curl hears of it, and shown to the agent with the key that would allow it; the
/// admin sees the rules in `cordon tool`.
#[test]
fn a_read_only_host_gets_its_gets_and_403_for_a_post_recorded_with_method_host_and_path() {
    if !usable() {
        return;
    }
    let port = upstream();
    let policy = format!(
        r#"version = 1

[defaults]
timeout = "20s"
network = {{ hosts = [{{ host = "127.0.0.1:{port}", read_only = true, paths = ["/repos/ORG/"] }}] }}

[tools.fetch]
description = "fetches a URL"
reason = "egress tests"
command = [{curl}, "-sS", "--max-time", "10", "{{{{url}}}}"]

[tools.fetch.params.url]
type = "string"
pattern = "http://[^\\x00 ]+"
required = true

[tools.post]
description = "posts to a URL, through an HTTP CONNECT tunnel when asked"
reason = "egress tests"
command = [{curl}, "-sS", "--max-time", "10", "-X", "POST", "-d", "x=1", "{{{{how}}}}", "{{{{url}}}}"]

[tools.post.params.how]
type = "enum"
values = ["--proxytunnel", "--no-proxytunnel"]
required = true

[tools.post.params.url]
type = "string"
pattern = "http://[^\\x00 ]+"
required = true
"#,
        curl = q(CURL)
    );
    let d = Daemon::start(&[("rules.toml", &policy)]);
    let base = format!("http://127.0.0.1:{port}");

    let r = fetch(&d, "fetch", &format!("{base}/repos/ORG/x?token=query-secret"));
    assert_eq!((r["exit_code"].as_i64(), r["stdout"].as_str()), (Some(0), Some("hello from upstream\n")), "{r:#}");
    let records = records_of(&d, r["invocation_id"].as_str().unwrap());
    let allowed = records.iter().find(|r| r["decision"] == "egress").unwrap();
    assert_eq!(
        (&allowed["allowed"], &allowed["method"], &allowed["host"], &allowed["path"]),
        (&json!(true), &json!("GET"), &json!("127.0.0.1"), &json!("/repos/ORG/x"))
    );
    let closed = records.iter().find(|r| r["decision"] == "egress_closed").unwrap();
    assert_eq!(closed["status"], json!(200), "{closed}");

    for (how, protocol, decision) in
        [("--no-proxytunnel", "http", "egress"), ("--proxytunnel", "connect", "egress_closed")]
    {
        let r = d.run_json("post", &json!({ "how": how, "url": format!("{base}/repos/ORG/x") })).1;
        assert_eq!(r["exit_code"].as_i64(), Some(0), "curl prints the 403 page and succeeds: {r:#}");
        let stdout = r["stdout"].as_str().unwrap();
        assert!(
            stdout.starts_with(&format!(
                "cordon: the egress proxy refused 127.0.0.1:{port} for tool post: POST /repos/ORG/x to \
                 127.0.0.1:{port} was refused: the method POST is not among the methods its network.hosts entry \
                 allows (GET, HEAD, OPTIONS)"
            )),
            "{how}: {r:#}"
        );
        let denial = &r["denials"][0];
        assert_eq!(
            (&denial["source"], &denial["grant_key"], &denial["access"]),
            (&json!("proxy"), &json!("methods"), &json!(["request-rule"])),
            "{how}: {r:#}"
        );
        assert!(denial["message"].as_str().unwrap().contains("adding \"POST\" to that entry's methods"), "{denial}");
        let records = records_of(&d, r["invocation_id"].as_str().unwrap());
        let refused = records.iter().find(|r| r["why"] == "request-rule").unwrap_or_else(|| panic!("{records:#?}"));
        assert_eq!(
            (&refused["decision"], &refused["protocol"], &refused["allowed"], &refused["status"]),
            (&json!(decision), &json!(protocol), &json!(false), &json!(403)),
            "{how}: {refused}"
        );
        assert_eq!(
            (&refused["method"], &refused["host"], &refused["path"]),
            (&json!("POST"), &json!("127.0.0.1"), &json!("/repos/ORG/x"))
        );
        let finished = records.iter().find(|r| r["decision"] == "finished").unwrap();
        assert_eq!(finished["denials"][0]["grant_key"], "methods", "{finished}");
    }
    // The URL is the call's argument (in its `started` record); the proxy's records keep no query.
    let proxy: Vec<Value> = d
        .audit_records()
        .into_iter()
        .filter(|r| r["decision"].as_str().is_some_and(|d| d.starts_with("egress")))
        .collect();
    assert!(proxy.len() >= 4, "{proxy:#?}");
    assert!(!serde_json::to_string(&proxy).unwrap().contains("query-secret"), "{proxy:#?}");

    let shown = d.cordon(&["tool", "fetch"]);
    let text = &shown.stdout;
    assert!(
        text.contains(&format!("host rules  127.0.0.1:{port}: methods GET, HEAD, OPTIONS; paths /repos/ORG/")),
        "{text}"
    );
}
