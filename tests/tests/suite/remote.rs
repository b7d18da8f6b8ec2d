//! Remote daemons over mutual TLS (issue 17 part 1): the real cordond with `--listen-tls` on
//! 127.0.0.1, driven by the real `cordon --remote`, with a CA and certificates made by rcgen for
//! each test. A mapped certificate is its account (and sees only that account's tools); every
//! other client (an unknown, expired or foreign-signed certificate, none at all, plain HTTP/2)
//! is refused in the handshake: the audit log then holds the refusal and no record of any RPC.
//! Needs root (the mapped account is the suite's unprivileged test user).

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use cordon_tests::agent::{self, AGENT};
use cordon_tests::{Daemon, Output, bin, eventually, require_root};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};
use serde_json::{Value, json};

const POLICY: &str = r#"
version = 1

[tools.whoami]
description = "print the uid it runs as"
reason = "tests"
command = ["/usr/bin/id", "-u"]
allow = { users = ["cordon-t-agent"] }

[tools.hidden]
description = "no allow list: admins only"
reason = "tests"
command = ["/bin/true"]
"#;

/// A CA that can sign certificates.
struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, name);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let pem = p.self_signed(&key).unwrap().pem();
        Ca { issuer: Issuer::new(p, key), pem }
    }

    /// (certificate PEM, key PEM).
    fn sign(&self, p: CertificateParams) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn client(&self, cn: &str, expired: bool) -> (String, String) {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        if expired {
            p.not_before = rcgen::date_time_ymd(2020, 1, 1);
            p.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        self.sign(p)
    }
}

/// A daemon with a TLS listener, and the files its clients use.
struct Remote {
    d: Daemon,
    url: String,
    certs: PathBuf,
}

fn write(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The address cordond logged for `--listen-tls 127.0.0.1:0`.
fn tls_address(d: &Daemon) -> String {
    let log = d.log_text();
    let line = log.lines().find(|l| l.contains("TLS listener")).unwrap_or_else(|| panic!("{log}"));
    let start = line.find("address=").unwrap() + "address=".len();
    line[start..].split_whitespace().next().unwrap().to_string()
}

const IDENTITIES: &str = r#"
[[identity]]
match = { common_name = "agent-1" }
user = "cordon-t-agent"
"#;

/// The files of a TLS daemon in `dir/tls`: the CA, the server's certificate (127.0.0.1 and
/// localhost) and key, the mapping; and client certificates: `agent` (mapped), `stranger`
/// (unmapped), `expired` (mapped name, expired), `foreign` (mapped name, another CA).
fn make_certs(dir: &Path) -> PathBuf {
    make_certs_for(dir, &["127.0.0.1", "localhost"])
}

/// [`make_certs`], the server's certificate for `names`.
fn make_certs_for(dir: &Path, names: &[&str]) -> PathBuf {
    let tls = dir.join("tls");
    std::fs::create_dir(&tls).unwrap();
    let ca = Ca::new("cordon test CA");
    write(&tls.join("ca.pem"), &ca.pem, 0o644);
    let mut server = CertificateParams::new(names.iter().map(ToString::to_string).collect::<Vec<_>>()).unwrap();
    server.distinguished_name.push(DnType::CommonName, "cordond test");
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let (cert, key) = ca.sign(server);
    write(&tls.join("server.pem"), &cert, 0o644);
    write(&tls.join("server.key"), &key, 0o600);
    write(&tls.join("identities.toml"), IDENTITIES, 0o644);
    let other = Ca::new("another CA");
    for (name, (cert, key)) in [
        ("agent", ca.client("agent-1", false)),
        ("stranger", ca.client("stranger", false)),
        ("expired", ca.client("agent-1", true)),
        ("foreign", other.client("agent-1", false)),
    ] {
        write(&tls.join(format!("{name}.pem")), &cert, 0o644);
        write(&tls.join(format!("{name}.key")), &key, 0o600);
    }
    tls
}

fn tls_flags(tls: &Path) -> Vec<String> {
    let p = |n: &str| tls.join(n).to_str().unwrap().to_string();
    vec![
        "--listen-tls".into(),
        "127.0.0.1:0".into(),
        "--tls-cert".into(),
        p("server.pem"),
        "--tls-key".into(),
        p("server.key"),
        "--tls-client-ca".into(),
        p("ca.pem"),
        "--tls-identities".into(),
        p("identities.toml"),
    ]
}

fn start() -> Remote {
    start_for(&["127.0.0.1", "localhost"], &[])
}

/// A daemon whose certificate is for `names`, with `extra` flags.
fn start_for(names: &[&str], extra: &[&str]) -> Remote {
    agent::ensure();
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), POLICY).unwrap();
    let certs = make_certs_for(dir.path(), names);
    let flags = tls_flags(&certs);
    let mut flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    flags.extend_from_slice(extra);
    let d = Daemon::start_in(dir, policies, &flags);
    let url = format!("https://{}", tls_address(&d));
    Remote { d, url, certs }
}

impl Remote {
    /// The global flags of `cordon` for client `who` (`agent`, `stranger`, ...).
    fn flags(&self, who: &str, url: &str) -> Vec<OsString> {
        let f = |n: String| self.certs.join(n).into_os_string();
        vec![
            "--remote".into(),
            url.into(),
            "--cert".into(),
            f(format!("{who}.pem")),
            "--key".into(),
            f(format!("{who}.key")),
            "--ca".into(),
            f("ca.pem".into()),
        ]
    }

    /// `cordon --remote URL` as client `who` (run as root: the identity is the certificate's).
    fn cordon(&self, who: &str, args: &[&str]) -> Output {
        self.cordon_at(who, &self.url, args)
    }

    fn cordon_at(&self, who: &str, url: &str, args: &[&str]) -> Output {
        Command::new(bin("cordon"))
            .args(self.flags(who, url))
            .args(args)
            .env_remove("CORDON_SOCKET")
            .stdin(Stdio::null())
            .output()
            .unwrap()
            .into()
    }

    /// The records after the first `skip`, once the log has at least `n` more.
    fn records_after(&self, skip: usize, n: usize) -> Vec<Value> {
        let mut new = Vec::new();
        assert!(
            eventually(Duration::from_secs(10), || {
                new = self.d.audit_records().into_iter().skip(skip).collect();
                new.len() >= n
            }),
            "expected {n} new audit records, got {new:#?}"
        );
        // Nothing else trickles in after them.
        std::thread::sleep(Duration::from_millis(300));
        self.d.audit_records().into_iter().skip(skip).collect()
    }
}

/// Asserts that `records` is exactly one refused handshake with `reason`.
#[track_caller]
fn assert_only_refusal(records: &[Value], reason: &str, subject: Option<&str>) {
    assert_eq!(records.len(), 1, "only the refusal, no RPC: {records:#?}");
    let r = &records[0];
    assert_eq!(
        (&r["decision"], &r["operation"], &r["reason"], &r["code"]),
        (&json!("unauthenticated"), &json!("tls_handshake"), &json!(reason), &json!("CERTIFICATE_REFUSED")),
        "{r}"
    );
    assert!(r["peer"].as_str().unwrap().starts_with("127.0.0.1:"), "{r}");
    assert_eq!(r.get("subject").and_then(Value::as_str), subject, "{r}");
    assert!(r.get("caller").is_none(), "{r}");
}

#[test]
fn a_mapped_certificate_is_its_account_and_sees_only_its_tools() {
    require_root!();
    let r = start();
    let out = r.cordon("agent", &["tools", "--json"]);
    out.assert_code(0);
    let listed = out.json();
    let names: Vec<&str> = listed["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["whoami"], "{out:?}");
    // The tool runs as the mapped account, not as the root client on the other end.
    let uid = agent::id("-u", AGENT);
    let out = r.cordon("agent", &["run", "whoami"]);
    out.assert_code(0);
    assert_eq!(out.stdout.trim(), uid.to_string());
    let out = r.cordon("agent", &["run", "hidden", "--json"]);
    out.assert_code(77);
    assert_eq!(out.json()["error"]["code"], "PERMISSION_DENIED");
    // By name too: localhost is in the daemon's certificate.
    let port = r.url.rsplit_once(':').unwrap().1;
    r.cordon_at("agent", &format!("https://localhost:{port}"), &["run", "whoami"]).assert_code(0);
    // The audit names the certificate's identity; no pid (there is no local process).
    let mut started = Vec::new();
    assert!(eventually(Duration::from_secs(10), || {
        started = r.d.audit_records().into_iter().filter(|x| x["decision"] == "started").collect();
        started.len() == 2
    }));
    assert_eq!(started[0]["caller"]["uid"], uid, "{}", started[0]);
    assert_eq!(started[0]["caller"]["pid"], Value::Null, "{}", started[0]);
    assert_eq!(started[0]["caller"]["certificate"], "common_name=agent-1", "{}", started[0]);
    assert_eq!(started[0]["run_as"]["uid"], uid, "{}", started[0]);
    // `cordon mcp` reaches the remote daemon the same way.
    let mut s = cordon_tests::mcp_lines::Session::start_args(&r.flags("agent", &r.url));
    let list = s.request("tools/list", json!({}));
    let names: Vec<&str> = list["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"whoami") && !names.contains(&"hidden"), "{list}");
    let result = s.call("whoami", json!({}));
    assert!(result.to_string().contains(&uid.to_string()), "{result}");
}

#[test]
fn a_mapped_non_admin_cannot_administer_the_daemon() {
    require_root!();
    let r = start();
    for args in [&["reload"][..], &["approve", "abc"], &["audit", "tail"]] {
        let out = r.cordon("agent", args);
        out.assert_code(77);
        assert!(out.stderr.contains("is for admins"), "{args:?}: {out:?}");
    }
    let mut refused = Vec::new();
    assert!(eventually(Duration::from_secs(10), || {
        refused = r.d.audit_records().into_iter().filter(|x| x["decision"] == "unauthorized").collect();
        refused.len() == 3
    }));
    for x in &refused {
        assert_eq!(x["caller"]["certificate"], "common_name=agent-1", "{x}");
    }
}

#[test]
fn unknown_expired_and_foreign_certificates_are_refused_in_the_handshake() {
    require_root!();
    let r = start();
    for (who, alert, reason, subject, says) in [
        ("stranger", "AccessDenied", "unmapped", Some("CN=stranger"), "no identity is mapped to it"),
        ("expired", "CertificateExpired", "expired", Some("CN=agent-1"), "it has expired"),
        ("foreign", "UnknownCA", "unknown_issuer", Some("CN=agent-1"), "not signed by the CA the daemon trusts"),
    ] {
        let before = r.d.audit_records().len();
        let out = r.cordon(who, &["tools", "--json"]);
        out.assert_code(77);
        let e = &out.json()["error"];
        assert_eq!(e["code"], "CERTIFICATE_REFUSED", "{who}: {out:?}");
        let message = e["message"].as_str().unwrap();
        assert!(message.contains(&format!("the daemon at {} refused this client certificate", r.url)), "{message}");
        assert!(message.contains(&format!("TLS alert {alert}")) && message.contains(says), "{who}: {message}");
        assert_only_refusal(&r.records_after(before, 1), reason, subject);
    }
}

#[test]
fn no_certificate_and_plain_http2_are_refused_before_any_rpc() {
    require_root!();
    let r = start();
    let addr = r.url.trim_start_matches("https://").to_string();
    let ca = r.certs.join("ca.pem");
    // TLS without a client certificate (curl offers none).
    let before = r.d.audit_records().len();
    let out = Command::new("curl")
        .args(["-sS", "--http2", "--max-time", "10", "--cacert"])
        .arg(&ca)
        .args(["-X", "POST", "-H", "content-type: application/grpc"])
        .arg(format!("https://{addr}/cordon.v1.Cordon/ListTools"))
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    assert_only_refusal(&r.records_after(before, 1), "no_certificate", None);
    // HTTP/2 without TLS: a gRPC request in the clear.
    let before = r.d.audit_records().len();
    let out = Command::new("curl")
        .args([
            "-sS",
            "--http2-prior-knowledge",
            "--max-time",
            "10",
            "-X",
            "POST",
            "-H",
            "content-type: application/grpc",
        ])
        .arg(format!("http://{addr}/cordon.v1.Cordon/ListTools"))
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    assert_only_refusal(&r.records_after(before, 1), "not_tls", None);
}

#[test]
fn the_client_checks_the_daemons_certificate_and_its_own_files() {
    require_root!();
    let r = start();
    // A CA that did not sign the daemon's certificate.
    let out = Command::new(bin("cordon"))
        .args(["--remote", &r.url, "--cert"])
        .arg(r.certs.join("agent.pem"))
        .arg("--key")
        .arg(r.certs.join("agent.key"))
        .arg("--ca")
        .arg(r.certs.join("foreign.pem"))
        .args(["tools", "--json"])
        .output()
        .unwrap();
    let out: Output = out.into();
    let e = &out.json()["error"];
    assert_eq!(e["code"], "CONNECT_FAILED", "{out:?}");
    assert!(e["message"].as_str().unwrap().contains("presented a certificate that --ca"), "{out:?}");
    // A key others can read is not used.
    std::fs::set_permissions(r.certs.join("agent.key"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = r.cordon("agent", &["tools"]);
    out.assert_code(2);
    assert!(out.stderr.contains("others can read it (mode 0644)"), "{out:?}");
    std::fs::set_permissions(r.certs.join("agent.key"), std::fs::Permissions::from_mode(0o600)).unwrap();
    // A key file that is a certificate.
    let out = Command::new(bin("cordon"))
        .args(["--remote", &r.url, "--cert"])
        .arg(r.certs.join("agent.pem"))
        .arg("--key")
        .arg(r.certs.join("stranger.key"))
        .arg("--ca")
        .arg(r.certs.join("ca.pem"))
        .arg("tools")
        .output()
        .unwrap();
    let out: Output = out.into();
    assert!(out.stderr.contains("do not belong together"), "{out:?}");
    // A daemon whose certificate is not for the address connected to.
    let other = start_for(&["localhost"], &[]);
    let out = other.cordon("agent", &["tools", "--json"]);
    let e = &out.json()["error"];
    assert_eq!(e["code"], "CONNECT_FAILED", "{out:?}");
    assert!(
        e["message"].as_str().unwrap().contains("the daemon's certificate is not valid for \"127.0.0.1\""),
        "{out:?}"
    );
    // Every connection goes to --remote: comparing it with "another" socket is refused.
    let out = r.cordon("agent", &["policy", "diff", "--against-socket", "/run/other.sock"]);
    out.assert_code(2);
    assert!(out.stderr.contains("--against-socket compares two daemons on this host"), "{out:?}");
    // Plain http is refused before anything is sent.
    let out = r.cordon_at("agent", &r.url.replace("https://", "http://"), &["tools"]);
    out.assert_code(2);
    assert!(out.stderr.contains("plain http"), "{out:?}");
}

/// Runs cordond with `flags` and the test's TLS files, expecting it to refuse to start.
fn refused_start(dir: &Path, tls: &Path, extra: &[&str]) -> String {
    let policies = dir.join("policies");
    let _ = std::fs::create_dir(&policies);
    std::fs::write(policies.join("t.toml"), POLICY).unwrap();
    let out = Command::new(bin("cordond"))
        .arg("--policies")
        .arg(&policies)
        .arg("--socket")
        .arg(dir.join("run").join("s.sock"))
        .arg("--audit")
        .arg(dir.join("audit").join("a.jsonl"))
        .args(["--admin-group", "", "--socket-group", ""])
        .args(tls_flags(tls))
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "cordond started: {out:?}");
    assert!(!dir.join("run").join("s.sock").exists());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn cordond_refuses_untrusted_or_wrong_tls_files_at_startup() {
    require_root!();
    agent::ensure();
    let dir = tempfile::tempdir().unwrap();
    let tls = make_certs(dir.path());
    // A mapping the agent user wrote.
    let ids = tls.join("identities.toml");
    nix::unistd::chown(&ids, Some(nix::unistd::Uid::from_raw(agent::id("-u", AGENT))), None).unwrap();
    let e = refused_start(dir.path(), &tls, &[]);
    assert!(e.contains(&format!("TLS identities file {} is owned by {AGENT}", ids.display())), "{e}");
    nix::unistd::chown(&ids, Some(nix::unistd::Uid::from_raw(0)), None).unwrap();
    // Writable by others.
    std::fs::set_permissions(&ids, std::fs::Permissions::from_mode(0o666)).unwrap();
    let e = refused_start(dir.path(), &tls, &[]);
    assert!(e.contains("is writable by group and others (mode 0666"), "{e}");
    std::fs::set_permissions(&ids, std::fs::Permissions::from_mode(0o644)).unwrap();
    // The key readable by others.
    let key = tls.join("server.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = refused_start(dir.path(), &tls, &[]);
    assert!(e.contains(&format!("TLS private key {} is readable by others (mode 0644)", key.display())), "{e}");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    // A mapping to root.
    write(&ids, "[[identity]]\nmatch = { common_name = \"x\" }\nuser = \"root\"\n", 0o644);
    let e = refused_start(dir.path(), &tls, &[]);
    assert!(e.contains("identities.toml:3:8: \"root\" is root; a remote identity never is"), "{e}");
    // The same checks offline, with every problem and its line.
    write(
        &ids,
        "[[identity]]\nmatch = {}\nuser = \"root\"\n\n[[identity]]\nmatch = { dns = \"a\" }\nuser = \"nobody-at-all\"\n",
        0o644,
    );
    let out = Command::new(bin("cordond"))
        .arg("--check-tls-identities")
        .arg(&ids)
        .args(["--admin-group", ""])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{e}");
    assert!(e.contains("3 problem(s)"), "{e}");
    assert!(
        e.contains("identities.toml:2:9: empty match")
            && e.contains("identities.toml:7:8: no such user \"nobody-at-all\""),
        "{e}"
    );
    write(&ids, IDENTITIES, 0o644);
    let out = Command::new(bin("cordond"))
        .arg("--check-tls-identities")
        .arg(&ids)
        .args(["--admin-group", ""])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 identities, each mapped to one account"), "{out:?}");
    // Flags that do not go together.
    let out = Command::new(bin("cordond"))
        .args(["--policies", "/nonexistent", "--listen-tls", "127.0.0.1:0"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && e.contains("--tls-cert <PATH>") && e.contains("--tls-identities <PATH>"), "{e}");
}

/// The openssl lines of docs/remote.md ("Remote daemons (mutual TLS)"), run as written.
fn readme_openssl_lines() -> String {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/remote.md")).unwrap();
    let section = readme.split("\n## Remote daemons (mutual TLS)\n").nth(1).expect("the section of docs/remote.md");
    let block = section.split("```sh\n").nth(1).expect("its sh block");
    block.split("\n```").next().unwrap().to_string()
}

#[test]
fn the_readmes_openssl_commands_make_certificates_cordond_serves_with() {
    require_root!();
    agent::ensure();
    let dir = tempfile::tempdir().unwrap();
    let tls = dir.path().join("tls");
    std::fs::create_dir(&tls).unwrap();
    let lines = readme_openssl_lines();
    assert!(lines.lines().count() >= 7 && lines.contains("openssl x509 -req"), "{lines}");
    let out = Command::new("bash").args(["-euc", &lines]).current_dir(&tls).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    write(&tls.join("identities.toml"), &IDENTITIES.replace("agent-1", "ci-runner-1"), 0o644);
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("t.toml"), POLICY).unwrap();
    let p = |n: &str| tls.join(n).to_str().unwrap().to_string();
    let flags = tls_flags(&tls);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let d = Daemon::start_in(dir, policies, &flags);
    let url = format!("https://{}", tls_address(&d));
    let out: Output = Command::new(bin("cordon"))
        .args(["--remote", &url, "--cert", &p("client.pem"), "--key", &p("client.key"), "--ca", &p("ca.pem")])
        .args(["run", "whoami"])
        .output()
        .unwrap()
        .into();
    out.assert_code(0);
    assert_eq!(out.stdout.trim(), agent::id("-u", AGENT).to_string());
}

#[test]
fn a_reload_rereads_the_mapping_and_a_broken_one_keeps_the_previous() {
    require_root!();
    let r = start();
    r.cordon("stranger", &["tools"]).assert_code(77);
    let ids = r.certs.join("identities.toml");
    write(
        &ids,
        &format!("{IDENTITIES}\n[[identity]]\nmatch = {{ common_name = \"stranger\" }}\nuser = \"{AGENT}\"\n"),
        0o644,
    );
    r.d.signal(nix::sys::signal::Signal::SIGHUP);
    assert!(eventually(Duration::from_secs(10), || r.cordon("stranger", &["tools"]).code == Some(0)));
    // A mapping that no longer loads rejects the whole reload (exit 65, the file and why),
    // audited, and the previous one stays.
    write(&ids, "[[identity]]\nmatch = {}\nuser = \"nobody-at-all\"\n", 0o644);
    let reload = r.d.cordon(&["reload"]);
    reload.assert_code(65);
    assert!(reload.stderr.contains("identities.toml") && reload.stderr.contains("empty match"), "{reload:?}");
    let mut rejected = Vec::new();
    assert!(eventually(Duration::from_secs(10), || {
        rejected = r.d.audit_records().into_iter().filter(|x| x["decision"] == "reload_rejected").collect();
        !rejected.is_empty()
    }));
    assert_eq!(rejected[0]["what"], serde_json::json!(["tls_identities"]), "{}", rejected[0]);
    assert!(rejected[0]["message"].as_str().unwrap().contains("empty match"), "{}", rejected[0]);
    r.cordon("stranger", &["tools"]).assert_code(0);
    r.cordon("agent", &["tools"]).assert_code(0);
}

#[test]
fn a_flood_of_refused_handshakes_is_audited_at_a_bounded_rate() {
    require_root!();
    let r = start_for(&["127.0.0.1"], &["--metrics", "127.0.0.1:0"]);
    let before = r.d.audit_records().len();
    let addr = r.url.trim_start_matches("https://").to_string();
    // 30 clients in the clear: each refused; 20 recorded one by one (the window's budget).
    for _ in 0..30 {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        use std::io::{Read as _, Write as _};
        let _ = s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        let _ = s.read(&mut [0u8; 64]);
    }
    let records = r.records_after(before, 20);
    assert_eq!(records.len(), 20, "{records:#?}");
    assert!(records.iter().all(|x| x["reason"] == "not_tls" && x["operation"] == "tls_handshake"));
    // The metrics count every one.
    let out = r.d.cordon(&["metrics"]);
    out.assert_code(0);
    assert!(out.stdout.contains("cordon_tls_handshakes_refused_total{reason=\"not_tls\"} 30"), "{}", out.stdout);
}

/// Attack: a stolen client key keeps working after the admin removes its mapping. The thief's
/// `cordon mcp --remote` holds one connection; after the reload that unmaps `agent-1`, new
/// handshakes are refused, and so must every further request on the connection already open.
#[test]
fn a_reload_that_unmaps_a_certificate_ends_its_open_connection() {
    require_root!();
    let r = start();
    let mut mcp = cordon_tests::mcp_lines::Session::start_args(&r.flags("agent", &r.url));
    let before = mcp.call("whoami", json!({}));
    assert_eq!(before["isError"], json!(false), "{before}");
    let ids = r.certs.join("identities.toml");
    write(&ids, &format!("[[identity]]\nmatch = {{ common_name = \"someone-else\" }}\nuser = \"{AGENT}\"\n"), 0o644);
    r.d.signal(nix::sys::signal::Signal::SIGHUP);
    assert!(eventually(Duration::from_secs(10), || r.cordon("agent", &["tools"]).code == Some(77)));
    let skip = r.d.audit_records().len();
    let after = mcp.call("whoami", json!({}));
    assert_eq!(after["isError"], json!(true), "the unmapped connection still runs tools: {after}");
    let text = after["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("--tls-identities no longer maps it so"), "{text}");
    // The request on the open connection is refused and recorded. (The refused handshake of the
    // probe above is recorded by its own connection's task, which may finish after `skip` was
    // taken: it is not this request's record.)
    let refused: Vec<Value> = r
        .records_after(skip, 1)
        .into_iter()
        .filter(|x| x["code"] == "CERTIFICATE_REFUSED" && x["operation"] != "tls_handshake")
        .collect();
    assert_eq!(refused.len(), 1, "{refused:#?}");
    assert_eq!(refused[0]["decision"], "unauthenticated", "{}", refused[0]);
    assert_eq!(refused[0]["caller"]["certificate"], "common_name=agent-1", "{}", refused[0]);
    assert!(
        !r.d.audit_records().iter().skip(skip).any(|x| x["decision"] == "started"),
        "nothing ran after the unmapping"
    );
}

/// Issue 26, class 3: a local account opens 16 silent connections from each of 20 loopback
/// addresses (320; before, they filled the listener's 256 handshake slots and every other
/// client was dropped). They count against that account's share (16 in progress, 256 waiting):
/// the 48 beyond get a TLS alert at once, with an audited reason;
/// a client of another account completes its handshake and is served all the while.
#[test]
fn silent_handshakes_of_one_account_do_not_starve_other_clients() {
    require_root!();
    let r = start();
    let port: u16 = r.url.rsplit_once(':').unwrap().1.parse().unwrap();
    let sources: Vec<String> = (1..=20).map(|i| format!("127.0.0.{}", i + 1)).collect();
    // 16 in progress, 256 waiting: the 48 beyond get their alert at once.
    let held = cordon_tests::silent::hold(Some(AGENT), port, 16, &sources, 48);
    assert_eq!(held.opened, 320);
    assert!(held.refused >= 48, "{held:?}");
    // Another account (root, with the agent's certificate) is served.
    for _ in 0..3 {
        r.cordon("agent", &["run", "whoami"]).assert_code(0);
    }
    let uid = agent::id("-u", AGENT);
    let limit =
        r.d.audit_records()
            .into_iter()
            .filter(|x| x["reason"] == "limit" && x["operation"] == "tls_handshake")
            .collect::<Vec<_>>();
    assert!(!limit.is_empty(), "the refusals are audited");
    assert!(
        limit[0]["message"].as_str().unwrap().contains(&format!("too many TLS handshakes from uid {uid}")),
        "{}",
        limit[0]
    );
    drop(held);
}

/// Issue 26, class 3, load: a burst of 64 honest remote clients from one host, 5 calls each
/// (before, 240 of the 320 were refused without a reason). Handshakes beyond the 16 in progress
/// per source wait their turn: every call is served.
#[test]
fn a_burst_of_64_clients_from_one_host_is_queued_and_all_served() {
    require_root!();
    let r = std::sync::Arc::new(start());
    let threads: Vec<_> = (0..64)
        .map(|_| {
            let r = r.clone();
            std::thread::spawn(move || (0..5).filter(|_| r.cordon("agent", &["tools"]).code == Some(0)).count())
        })
        .collect();
    let served: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(served, 320);
    let limit = r.d.audit_records().into_iter().filter(|x| x["reason"] == "limit").count();
    assert_eq!(limit, 0, "no handshake refused");
}
