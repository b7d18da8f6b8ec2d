//! The Prometheus endpoint (`cordond --metrics`, issue 17 part 4) through the real daemon:
//! scraped with curl on 127.0.0.1 after calls that end every way, with exact counter values;
//! no token, a wrong one, or a non-loopback address are refused.

use std::path::Path;
use std::process::Command;

use cordon_tests::Daemon;
use serde_json::json;

const CURL: &str = "/usr/bin/curl";

fn policy(egress_port: Option<u16>) -> String {
    let mut p = String::from(
        r#"version = 1

[tools.yes]
description = "succeeds"
reason = "metrics tests"
command = ["/bin/true"]

[tools.no]
description = "exits 1"
reason = "metrics tests"
command = ["/bin/false"]

[tools.slow]
description = "outlives its timeout"
reason = "metrics tests"
command = ["/bin/sleep", "30"]
timeout = "1s"
"#,
    );
    if let Some(port) = egress_port {
        p.push_str(&format!(
            r#"
[tools.fetch]
description = "fetches a URL"
reason = "metrics tests"
command = ["{CURL}", "-sS", "--max-time", "10", "{{{{url}}}}"]
network = {{ hosts = ["127.0.0.1:{port}"] }}

[tools.fetch.params.url]
type = "string"
pattern = "http://[^\\x00 ]+"
required = true
"#
        ));
    }
    p
}

/// The address cordond logged for `--metrics 127.0.0.1:0`.
fn metrics_address(d: &Daemon) -> String {
    let log = d.log_text();
    let line = log.lines().find(|l| l.contains("metrics endpoint listening")).unwrap_or_else(|| panic!("{log}"));
    let start = line.find("address=").unwrap() + "address=".len();
    line[start..].split_whitespace().next().unwrap().to_string()
}

/// `curl -sS` of `url` with these extra arguments: (HTTP status, body).
fn curl(url: &str, extra: &[&str]) -> (u16, String) {
    let out = Command::new(CURL)
        .args(["-sS", "--max-time", "10", "-o", "-", "-w", "\n%{http_code}"])
        .args(extra)
        .arg(url)
        .output()
        .unwrap();
    assert!(out.status.success(), "curl failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let (body, status) = text.rsplit_once('\n').unwrap();
    (status.parse().unwrap(), body.to_string())
}

fn scrape(url: &str, token: &str) -> String {
    let (status, body) = curl(url, &["-H", &format!("Authorization: Bearer {token}")]);
    assert_eq!(status, 200, "{body}");
    check_openmetrics(&body);
    body
}

/// The value of the sample `name{labels}` exactly as written, or None.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// A strict check of the OpenMetrics text format as Prometheus reads it (promtool is not
/// installed here): every family has `# TYPE` before its samples, every sample belongs to the
/// family above it with a suffix its type allows, label values are quoted, values are numbers,
/// and `# EOF` ends the text.
fn check_openmetrics(text: &str) {
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.last(), Some(&"# EOF"), "no # EOF at the end:\n{text}");
    let mut family: Option<(String, String)> = None;
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.chars()
                .enumerate()
                .all(|(i, c)| c == '_' || c == ':' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()))
    };
    for line in &lines[..lines.len() - 1] {
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (kind, name, value) = (parts.next().unwrap(), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            assert!(name_ok(name) && name.starts_with("cordon_"), "bad family name in {line:?}");
            match kind {
                "TYPE" => {
                    assert!(["counter", "gauge", "histogram", "info"].contains(&value), "{line:?}");
                    family = Some((name.to_string(), value.to_string()));
                }
                "HELP" => assert!(!value.is_empty(), "{line:?}"),
                "UNIT" => assert!(["seconds", "bytes"].contains(&value) && name.ends_with(value), "{line:?}"),
                _ => panic!("unknown comment {line:?}"),
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value in {line:?}"));
        assert!(value.parse::<f64>().is_ok(), "value of {line:?}");
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, Some(l.strip_suffix('}').unwrap_or_else(|| panic!("unclosed labels in {line:?}")))),
            None => (series, None),
        };
        let (fam, kind) = family.as_ref().unwrap_or_else(|| panic!("sample before any # TYPE: {line:?}"));
        let suffix = name.strip_prefix(fam.as_str()).unwrap_or_else(|| panic!("{line:?} is not of family {fam}"));
        let allowed: &[&str] = match kind.as_str() {
            "counter" => &["_total", "_created"],
            "gauge" => &[""],
            "histogram" => &["_bucket", "_sum", "_count", "_created"],
            "info" => &["_info"],
            _ => unreachable!(),
        };
        assert!(allowed.contains(&suffix), "{line:?}: suffix {suffix:?} for a {kind}");
        if let Some(labels) = labels {
            for pair in labels.split("\",").filter(|p| !p.is_empty()) {
                let (key, value) = pair.split_once("=\"").unwrap_or_else(|| panic!("label {pair:?} in {line:?}"));
                assert!(name_ok(key), "label name {key:?} in {line:?}");
                assert!(!value.contains('\n'), "{line:?}");
            }
        }
    }
}

#[test]
fn counts_every_outcome_and_refusal_exactly_and_speaks_openmetrics() {
    if !Path::new(CURL).exists() {
        cordon_tests::skip!(cordon_tests::Skip::MissingTool(CURL), "needs {CURL}");
        return;
    }
    let egress = cordon_tests::is_root().then(upstream);
    if egress.is_none() {
        cordon_tests::skip!(cordon_tests::Skip::NotRoot, "the egress counters (a network namespace per tool)");
    }
    let d = Daemon::start_with(&[("m.toml", &policy(egress))], &["--metrics", "127.0.0.1:0"]);
    let address = metrics_address(&d);
    assert!(address.starts_with("127.0.0.1:") && !address.ends_with(":0"), "{address}");
    let url = format!("http://{address}/metrics");
    let token_file = d.audit.parent().unwrap().join("metrics.token");
    let token = std::fs::read_to_string(&token_file).unwrap().trim_end().to_string();
    assert_eq!(token.len(), 64, "{token}");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777, 0o600);

    // Before any call: zero running, the first generation, three tools (four with fetch).
    let before = scrape(&url, &token);
    assert_eq!(sample(&before, "cordon_invocations_running"), Some(0.0), "{before}");
    assert_eq!(sample(&before, "cordon_registry_generation"), Some(1.0), "{before}");
    let tools = if egress.is_some() { 4.0 } else { 3.0 };
    assert_eq!(sample(&before, "cordon_tools{state=\"available\"}"), Some(tools), "{before}");
    assert!(before.contains("cordon_build_info{version=\""), "{before}");

    for _ in 0..2 {
        d.cordon(&["run", "yes"]).assert_code(0);
    }
    d.cordon(&["run", "no"]);
    d.cordon(&["run", "slow"]);
    // Refused by the daemon: an unknown tool, and the wrong arguments.
    let unknown = d.cordon(&["run", "nosuch", "--json"]);
    assert_ne!(unknown.code, Some(0));
    let (_, r) = d.run_json("yes", &json!({ "stray": 1 }));
    assert_eq!(r["error"]["code"], "UNKNOWN_FIELDS", "{r:#}");
    if let Some(port) = egress {
        let (_, r) = d.run_json("fetch", &json!({ "url": format!("http://127.0.0.1:{port}/a") }));
        assert_eq!(r["stdout"], "hello from upstream\n", "{r:#}");
        // Refused by the proxy before any resolution: the name is no grant.
        let (_, r) = d.run_json("fetch", &json!({ "url": "http://not-granted.invalid/x" }));
        assert_eq!(r["exit_code"], 0, "curl prints the 403 page: {r:#}");
    }

    let text = scrape(&url, &token);
    let expect = |series: &str, value: f64| assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
    expect("cordon_invocations_total{tool=\"yes\",outcome=\"ok\"}", 2.0);
    expect("cordon_invocations_total{tool=\"no\",outcome=\"failed\"}", 1.0);
    expect("cordon_invocations_total{tool=\"slow\",outcome=\"timed_out\"}", 1.0);
    expect("cordon_invocation_duration_seconds_count{tool=\"yes\"}", 2.0);
    expect("cordon_invocation_duration_seconds_count{tool=\"slow\"}", 1.0);
    // The timeout is 1 s: the slow call is above the 0.5 s bucket, within +Inf.
    expect("cordon_invocation_duration_seconds_bucket{le=\"0.5\",tool=\"slow\"}", 0.0);
    expect("cordon_invocation_duration_seconds_bucket{le=\"+Inf\",tool=\"slow\"}", 1.0);
    expect("cordon_refusals_total{code=\"UNKNOWN_TOOL\"}", 1.0);
    expect("cordon_refusals_total{code=\"UNKNOWN_FIELDS\"}", 1.0);
    expect("cordon_invocations_running", 0.0);
    expect("cordon_invocations_queued", 0.0);
    assert!(!text.contains("nosuch"), "a caller's tool name is never a label:\n{text}");
    assert!(!text.contains("stray"), "nor an argument:\n{text}");
    let writes = sample(&text, "cordon_audit_write_duration_seconds_count").unwrap();
    assert!(writes >= 1.0, "{text}");
    expect("cordon_audit_failures_total", 0.0);
    // The same text over the gRPC socket, for admins (root here): `cordon metrics`.
    let rpc = d.cordon(&["metrics"]);
    rpc.assert_code(0);
    check_openmetrics(&rpc.stdout);
    assert_eq!(sample(&rpc.stdout, "cordon_invocations_total{tool=\"no\",outcome=\"failed\"}"), Some(1.0));
    if egress.is_some() {
        expect("cordon_invocations_total{tool=\"fetch\",outcome=\"ok\"}", 2.0);
        expect("cordon_egress_connections_total{tool=\"fetch\",result=\"allowed\",reason=\"\"}", 1.0);
        expect("cordon_egress_connections_total{tool=\"fetch\",result=\"refused\",reason=\"not-listed\"}", 1.0);
        assert!(sample(&text, "cordon_egress_bytes_total{tool=\"fetch\",direction=\"to_tool\"}").unwrap() > 20.0);
        assert!(!text.contains("not-granted.invalid"), "a host a tool asked for is never a label:\n{text}");
    }
}

#[test]
fn without_the_token_or_with_a_wrong_one_the_answer_is_401() {
    if !Path::new(CURL).exists() {
        cordon_tests::skip!(cordon_tests::Skip::MissingTool(CURL), "needs {CURL}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "an-admins-token-0123456789\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let d = Daemon::start_with(
        &[("m.toml", &policy(None))],
        &["--metrics", "127.0.0.1:0", "--metrics-token-file", token_file.to_str().unwrap()],
    );
    let url = format!("http://{}/metrics", metrics_address(&d));
    for extra in [
        &[][..],
        &["-H", "Authorization: Bearer wrong-token-0123456789"][..],
        &["-H", "Authorization: Bearer an-admins-token-012345678"][..],
        &["-H", "Authorization: Basic an-admins-token-0123456789"][..],
        &["-H", "Authorization: Bearer an-admins-token-0123456789", "-H", "Authorization: Bearer x"][..],
    ] {
        let (status, body) = curl(&url, extra);
        assert_eq!(
            (status, body.as_str()),
            (401, "cordon metrics: send Authorization: Bearer <the metrics token>\n"),
            "{extra:?}"
        );
    }
    let good = ["-H", "Authorization: Bearer an-admins-token-0123456789"];
    let (status, body) = curl(&url, &good);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\ncordon_audit_failures_total 0\n"), "{body}");
    let (status, _) = curl(&format!("http://{}/other", metrics_address(&d)), &good);
    assert_eq!(status, 404);
    assert!(!d.dir.path().join("audit").join("metrics.token").exists(), "the admin's token is used, none written");
}

#[test]
fn cordon_metrics_is_for_admins_and_says_when_metrics_are_off() {
    cordon_tests::require_root!();
    use std::os::unix::fs::PermissionsExt as _;
    let start = |extra: &[&str]| {
        let dir = tempfile::tempdir().unwrap();
        // The agent must be able to reach the socket's directory.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let policies = dir.path().join("policies");
        std::fs::create_dir(&policies).unwrap();
        std::fs::write(policies.join("m.toml"), policy(None)).unwrap();
        let mut args = vec!["--socket-group", cordon_tests::agent::SOCKET_GROUP];
        args.extend_from_slice(extra);
        Daemon::start_in(dir, policies, &args)
    };
    let on = start(&["--metrics", "127.0.0.1:0"]);
    let agent = cordon_tests::agent::cordon(&on.socket, &["metrics"]);
    assert_ne!(agent.code, Some(0));
    assert!(agent.stderr.contains("PERMISSION_DENIED"), "{agent:?}");
    assert!(agent.stdout.is_empty(), "{agent:?}");
    // The record is queued for the audit writer as the answer goes out: wait for it.
    let mut refused = 0;
    cordon_tests::eventually(std::time::Duration::from_secs(10), || {
        refused = on.audit_records().into_iter().filter(|r| r["operation"] == "get_metrics").count();
        refused > 0
    });
    assert_eq!(refused, 1, "the refusal is audited");

    let off = start(&[]);
    let out = off.cordon(&["metrics"]);
    assert_ne!(out.code, Some(0));
    assert!(out.stderr.contains("cordond counts metrics only when started with --metrics 127.0.0.1:PORT"), "{out:?}");
}

#[test]
fn a_non_loopback_address_or_a_readable_token_is_refused_at_startup() {
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("m.toml"), policy(None)).unwrap();
    let cordond = |extra: &[&str]| {
        let out = Command::new(cordon_tests::bin("cordond"))
            .arg("--policies")
            .arg(&policies)
            .arg("--socket")
            .arg(dir.path().join("s.sock"))
            .arg("--audit")
            .arg(dir.path().join("audit.jsonl"))
            .args(["--admin-group", "", "--socket-group", ""])
            .args(extra)
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    for addr in ["0.0.0.0:9464", "[::]:9464", "192.0.2.1:9464"] {
        let (code, stderr) = cordond(&["--metrics", addr]);
        assert_eq!(code, Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "{addr} is not a loopback address: cordond serves metrics on 127.0.0.1 or [::1] only, because \
                 they show the activity of every user"
            )),
            "{stderr}"
        );
    }
    let token = dir.path().join("token");
    std::fs::write(&token, "an-admins-token-0123456789\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, stderr) = cordond(&["--metrics", "127.0.0.1:0", "--metrics-token-file", token.to_str().unwrap()]);
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("every user can read it (mode 644)"), "{stderr}");
    assert!(!dir.path().join("s.sock").exists(), "nothing was served");
}

use cordon_tests::hello_upstream as upstream;

/// Issue 26, class 3: any local account opens 40 silent connections to the metrics port (more
/// than its share of 4 and its 8 places in the queue; before, 8 slots in all were taken before
/// `accept` and held for the head timeout). Its next request gets 503 with the reason; the admin's
/// authenticated scrape is served all the while.
#[test]
fn silent_connections_of_one_account_do_not_starve_the_admins_scrape() {
    cordon_tests::require_root!();
    cordon_tests::agent::ensure();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "an-admins-token-0123456789\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let d = Daemon::start_with(
        &[("m.toml", &policy(None))],
        &["--metrics", "127.0.0.1:0", "--metrics-token-file", token_file.to_str().unwrap()],
    );
    let address = metrics_address(&d);
    let url = format!("http://{address}/metrics");
    let port: u16 = address.rsplit_once(':').unwrap().1.parse().unwrap();
    let agent = cordon_tests::agent::AGENT;
    // 4 served, 8 waiting: the server answers the 28 beyond at once.
    let held = cordon_tests::silent::hold(Some(agent), port, 40, &["127.0.0.1".to_string()], 28);
    assert_eq!(held.opened, 40);
    assert!(held.refused >= 28, "{held:?}");
    let out = Command::new("setpriv")
        .args(["--reuid", agent, "--regid", agent, "--init-groups", "--", CURL, "-sS", "--max-time", "10", "-i"])
        .arg(&url)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let uid = cordon_tests::agent::id("-u", agent);
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(text.contains(&format!("too many connections from uid {uid}")), "{text}");
    for _ in 0..3 {
        scrape(&url, "an-admins-token-0123456789");
    }
    drop(held);
}
