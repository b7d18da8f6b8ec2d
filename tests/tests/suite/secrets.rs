//! Secrets a tool never sees (issue 30, item 1) through the real cordond: the tool gets a
//! per-call placeholder in the variable its policy names and the trust bundle in the usual
//! variables; cordond's egress proxy terminates TLS for the secret's host and puts the real value
//! in the header. The proof: real curl (`-H "Authorization: Bearer $TOKEN"`) and a Python
//! `requests` script call a loopback HTTPS upstream (rustls, with a CA of this test's own named
//! as the host's root-owned `upstream_ca`) that accepts only the real token; and the real value
//! is nowhere the tool or the agent can look: the tool's environ, cmdline, memory (every readable
//! mapping through /proc/PID/mem, and a gcore dump), the files it wrote, its output, the audit
//! log, cordond's log, the metrics endpoint, an MCP `tools/call` result. Rotation (a changed
//! source serves the next call, no restart) and a source that fails its checks at call time (the
//! call is refused, nothing is sent in its place) too. Everything listens on 127.0.0.1.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_tests::{Daemon, Skip, skip};
use serde_json::{Value, json};

const CURL: &str = "/usr/bin/curl";

fn q(s: impl AsRef<Path>) -> String {
    serde_json::to_string(s.as_ref().to_str().unwrap()).unwrap()
}

/// A fresh random token (hex of 24 bytes from /dev/urandom) with a recognisable prefix.
fn token(prefix: &str) -> String {
    let mut bytes = [0u8; 24];
    std::fs::File::open("/dev/urandom").unwrap().read_exact(&mut bytes).unwrap();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}{hex}")
}

/// A directory only root can write (beneath /tmp, which is sticky), for the secret's source and
/// the upstream's CA: both must be root's alone.
fn root_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("cordon-secrets-").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn write_secret(path: &Path, value: &str) {
    // Replaced whole (a new file renamed over the old): the way an admin's tooling rotates.
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, format!("{value}\n")).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The HTTPS upstream: accepts `Authorization: Bearer <expected>` only (200 "token ok"), else
/// 401; keeps every request head it got.
struct Upstream {
    port: u16,
    expected: Arc<Mutex<String>>,
    heads: Arc<Mutex<Vec<String>>>,
    ca: PathBuf,
}

fn upstream(dir: &Path, expected: &str) -> Upstream {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
    let ca_key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name.push(DnType::CommonName, "secrets test upstream CA");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let ca_pem = p.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(p, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_string()]).unwrap().signed_by(&leaf_key, &issuer).unwrap();
    let ca = dir.join("upstream-ca.pem");
    std::fs::write(&ca, ca_pem).unwrap();
    std::fs::set_permissions(&ca, std::fs::Permissions::from_mode(0o644)).unwrap();

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![rustls::pki_types::CertificateDer::from(leaf.der().to_vec())],
            rustls::pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der()).unwrap(),
        )
        .unwrap();
    let config = Arc::new(config);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let expected = Arc::new(Mutex::new(expected.to_string()));
    let heads = Arc::new(Mutex::new(Vec::new()));
    let (want, seen) = (expected.clone(), heads.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let (config, want, seen) = (config.clone(), want.clone(), seen.clone());
            std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(20)));
                let Ok(conn) = rustls::ServerConnection::new(config) else { return };
                let mut tls = rustls::StreamOwned::new(conn, stream);
                let mut reader = BufReader::new(&mut tls);
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    match reader.read_line(&mut line) {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                    head.push_str(&line);
                    if line == "\r\n" {
                        break;
                    }
                }
                let auth = head
                    .lines()
                    .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("authorization")))
                    .map(|(_, v)| v.trim().to_string())
                    .unwrap_or_default();
                let ok = auth == format!("Bearer {}", want.lock().unwrap());
                seen.lock().unwrap().push(head);
                let (status, body) = if ok { ("200 OK", "token ok\n") } else { ("401 Unauthorized", "bad token\n") };
                let reply = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(reply.as_bytes());
                let _ = tls.flush();
                tls.conn.send_close_notify();
                let _ = tls.flush();
            });
        }
    });
    Upstream { port, expected, heads, ca }
}

/// A Python that can `import requests`, and what the tool must be granted to run it: its
/// executable (real path: cordond runs the pinned file, so a venv is not found through the path
/// it was started by), the directory `requests` is in (`PYTHONPATH`), and its prefixes (`exec`)
/// and site directory (`read`) when they are outside /usr.
struct Python {
    exe: PathBuf,
    site: PathBuf,
    exec: Vec<PathBuf>,
    read: Vec<PathBuf>,
}

fn python_with_requests() -> Option<Python> {
    let script = "import os, sys, requests; print(os.path.realpath(sys.executable)); print(sys.base_prefix); \
                  print(sys.prefix); print(os.path.dirname(os.path.dirname(os.path.realpath(requests.__file__))))";
    let candidates: Vec<PathBuf> = std::env::var_os("CORDON_TEST_REQUESTS_PYTHON")
        .map(PathBuf::from)
        .into_iter()
        .chain([PathBuf::from("/opt/cordon-requests-venv/bin/python"), PathBuf::from("/usr/bin/python3")])
        .chain(Some(PathBuf::from("python3")))
        .collect();
    for c in candidates {
        let Ok(out) = Command::new(&c).args(["-c", script]).output() else { continue };
        if !out.status.success() {
            continue;
        }
        let text = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<PathBuf> = text.lines().map(PathBuf::from).collect();
        let outside = |p: &PathBuf| !p.starts_with("/usr");
        let exec: Vec<PathBuf> = [lines[1].clone()].into_iter().filter(outside).collect();
        let mut read: Vec<PathBuf> = [lines[2].clone(), lines[3].clone()].into_iter().filter(outside).collect();
        read.dedup();
        read.retain(|r| !exec.iter().any(|e| r.starts_with(e)));
        return Some(Python { exe: lines[0].clone(), site: lines[3].clone(), exec, read });
    }
    None
}

fn paths(list: &[PathBuf]) -> String {
    list.iter().map(q).collect::<Vec<_>>().join(", ")
}

/// The policy: `curl-api` (curl with the header from `$API_TOKEN`), `py-api` (Python requests,
/// which also writes what it saw into `out` and, with `hold`, waits there for the test to look
/// at its memory), `show-env` (prints its placeholder and trust variables).
fn policy(up: &Upstream, source: &Path, out: &Path, py: &Python) -> String {
    let port = up.port;
    let script = format!(
        r#"import os, sys, time, requests
tok = os.environ["API_TOKEN"]
r = requests.get("https://localhost:{port}/check", headers={{"Authorization": "Bearer " + tok}}, timeout=20)
out = sys.argv[1]
with open(os.path.join(out, "seen.txt"), "w") as f:
    f.write(tok + "\n" + str(r.status_code) + " " + r.text + "\n" + "\n".join(k + "=" + v for k, v in os.environ.items()))
print(r.status_code, r.text.strip())
sys.stdout.flush()
if len(sys.argv) > 2:
    open(os.path.join(out, "ready"), "w").close()
    while not os.path.exists(os.path.join(out, "done")):
        time.sleep(0.05)
"#
    );
    format!(
        r#"version = 1

[secrets.api]
source = {{ file = {source} }}
hosts = ["localhost:{port}"]
header = "Authorization"

[defaults]
timeout = "60s"
network = {{ hosts = [{{ host = "localhost:{port}", upstream_ca = {ca} }}, "127.0.0.1:{port}"] }}

[tools.curl-api]
description = "calls the API with curl, the token from an env variable"
reason = "secrets tests"
command = ["/bin/sh", "-c", "exec {curl} -sS --max-time 20 -H \"Authorization: Bearer $API_TOKEN\" https://localhost:{port}/check"]
secrets = {{ API_TOKEN = "api" }}

[tools.py-api]
description = "calls the API with Python requests"
reason = "secrets tests"
command = [{py}, "-c", {script}, {out}, "{{{{hold}}}}"]
write = [{out}]
env = {{ PYTHONPATH = {site} }}
exec = [{py_exec}]
read = [{py_read}]
secrets = {{ API_TOKEN = "api" }}

[tools.py-api.params.hold]
type = "enum"
values = ["", "hold"]
default = ""

[tools.exfil]
description = "sends its placeholder in a header the secret is not for, then in plain HTTP"
reason = "secrets tests"
command = ["/bin/sh", "-c", "{curl} -sS --max-time 20 -D - -o /dev/null -H \"X-Leak: $API_TOKEN\" https://localhost:{port}/check; {curl} -sS --max-time 20 -D - -o /dev/null \"http://127.0.0.1:{port}/?k=$API_TOKEN\"; true"]
secrets = {{ API_TOKEN = "api" }}

[tools.file-api]
description = "reads its token from the file $API_TOKEN_FILE names, shows the file, calls the API with curl"
reason = "secrets tests"
command = ["/bin/sh", "-c", 'stat -c "file=%a %u:%g %s" "$API_TOKEN_FILE"; echo "me=$(id -u):$(id -g)"; echo "path=$API_TOKEN_FILE"; echo "content=$(cat "$API_TOKEN_FILE")"; echo "env=$(env | grep -c cordon-secret-api-)"; echo; exec {curl} -sS --max-time 20 -H "Authorization: Bearer $(cat "$API_TOKEN_FILE")" https://localhost:{port}/check']
secrets = {{ API_TOKEN_FILE = {{ secret = "api", file = true }} }}
run_as = "nobody"

[tools.show-env]
description = "prints its placeholder and where its trust bundle is"
reason = "secrets tests"
command = ["/bin/sh", "-c", "echo \"token=$API_TOKEN\"; echo \"ssl=$SSL_CERT_FILE\"; echo \"requests=$REQUESTS_CA_BUNDLE\"; echo \"node=$NODE_EXTRA_CA_CERTS\"; grep -c 'BEGIN CERTIFICATE' \"$SSL_CERT_FILE\""]
secrets = {{ API_TOKEN = "api" }}
"#,
        source = q(source),
        ca = q(&up.ca),
        curl = CURL,
        py = q(&py.exe),
        script = serde_json::to_string(&script).unwrap(),
        out = q(out),
        site = q(&py.site),
        py_exec = paths(&py.exec),
        py_read = paths(&py.read),
    )
}

struct Setup {
    d: Daemon,
    up: Upstream,
    /// Root's directory: the secret's source and the upstream's CA.
    dir: tempfile::TempDir,
    source: PathBuf,
    /// Where the Python tool writes.
    out: PathBuf,
    value: String,
}

fn usable() -> Option<Python> {
    if !cordon_tests::is_root() {
        skip!(Skip::NotRoot, "a root cordond (root-owned secret sources, network namespaces)");
        return None;
    }
    if !Path::new(CURL).exists() {
        skip!(Skip::MissingTool(CURL), "the tools run {CURL}");
        return None;
    }
    let py = python_with_requests();
    if py.is_none() {
        skip!(
            Skip::MissingTool("python3 with requests"),
            "a Python requests tool (tests/run makes /opt/cordon-requests-venv)"
        );
    }
    py
}

fn setup(py: &Python, extra_args: &[&str]) -> Setup {
    let dir = root_dir();
    let value = token("real-token-");
    let source = dir.path().join("api-token");
    write_secret(&source, &value);
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let up = upstream(dir.path(), &value);
    let d = Daemon::start_with(&[("secrets.toml", &policy(&up, &source, &out, py))], extra_args);
    Setup { d, up, dir, source, out, value }
}

fn placeholder_of(text: &str) -> String {
    let at = text.find("cordon-secret-api-").unwrap_or_else(|| panic!("no placeholder in {text:?}"));
    text[at..at + "cordon-secret-api-".len() + 64].to_string()
}

fn run(d: &Daemon, tool: &str, args: &Value) -> Value {
    let (out, result) = d.run_json(tool, args);
    assert!(result.is_object(), "{out:?}");
    result
}

/// Every file beneath `dir`, read whole.
fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push((p.clone(), std::fs::read(&p).unwrap_or_default()));
        }
    }
    out
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The placeholder is in the tool's environment (never the value), with the trust bundle in the
/// usual variables: the system's roots and cordond's CA. A rotated source serves the next call
/// without a restart; a source that fails its checks at call time refuses the call, and nothing
/// is sent in its place. `cordon tool` shows the secret's name, hosts and place, never a value.
#[test]
fn the_tool_gets_a_fresh_placeholder_and_the_trust_bundle_and_a_broken_source_refuses_the_call() {
    let Some(py) = usable() else { return };
    let s = setup(&py, &[]);
    let first = run(&s.d, "show-env", &json!({}));
    assert_eq!(first["exit_code"], json!(0), "{first:#}");
    let stdout = first["stdout"].as_str().unwrap();
    let placeholder = placeholder_of(stdout);
    assert!(!stdout.contains(&s.value), "{stdout}");
    let bundle = s.d.socket.parent().unwrap().join("trust-bundle.pem");
    for var in ["ssl", "requests", "node"] {
        assert!(stdout.contains(&format!("{var}={}", bundle.display())), "{var}: {stdout}");
    }
    let certs: usize = stdout.lines().last().unwrap().trim().parse().unwrap();
    assert!(certs > 1, "the system's roots and cordond's CA: {stdout}");
    let bundle_text = std::fs::read_to_string(&bundle).unwrap();
    assert!(!bundle_text.contains("PRIVATE KEY"), "the CA's key is never written");
    let meta = std::fs::metadata(&bundle).unwrap();
    assert_eq!((meta.permissions().mode() & 0o7777, std::os::unix::fs::MetadataExt::uid(&meta)), (0o644, 0));

    // A fresh placeholder per call.
    let second = run(&s.d, "show-env", &json!({}));
    assert_ne!(placeholder_of(second["stdout"].as_str().unwrap()), placeholder);

    // `cordon tool` names the secret, its source, place and hosts; never its value.
    let shown = s.d.cordon(&["tool", "show-env"]);
    let text = format!("{}{}", shown.stdout, shown.stderr);
    assert!(text.contains("API_TOKEN") && text.contains("\"api\"") && text.contains("header authorization"), "{text}");
    assert!(text.contains(&format!("localhost:{}", s.up.port)) && text.contains("SSL_CERT_FILE"), "{text}");
    assert!(!text.contains(&s.value), "{text}");

    // A source others can read, at call time: the call is refused, with the reason.
    std::fs::set_permissions(&s.source, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (out, refused) = s.d.run_json("show-env", &json!({}));
    let why = refused.to_string();
    assert!(why.contains("TOOL_UNAVAILABLE") && why.contains("mode 0644") && why.contains("chmod 600"), "{out:?}");
    assert!(!why.contains(&s.value));
    // `tools --all` reads the source again: the tool shows unavailable, with the reason.
    let listed = s.d.cordon(&["tools", "--all"]);
    assert!(format!("{}{}", listed.stdout, listed.stderr).contains("mode 0644"), "{listed:?}");
    // A source that is gone.
    std::fs::remove_file(&s.source).unwrap();
    let (out, refused) = s.d.run_json("show-env", &json!({}));
    assert!(refused.to_string().contains("does not exist"), "{out:?}");
    // A source another user owns.
    write_secret(&s.source, &s.value);
    std::os::unix::fs::chown(&s.source, Some(65534), None).unwrap();
    let (out, refused) = s.d.run_json("show-env", &json!({}));
    assert!(refused.to_string().contains("owned by uid 65534"), "{out:?}");
    std::os::unix::fs::chown(&s.source, Some(0), None).unwrap();
    assert_eq!(run(&s.d, "show-env", &json!({}))["exit_code"], json!(0), "root's again: the call runs");
    drop(s.dir);
}

/// `cordon policy check` and `cordon tools --all` say why a tool whose source is missing is
/// unavailable.
#[test]
fn a_missing_source_makes_the_tool_unavailable_with_the_reason() {
    let Some(py) = usable() else { return };
    let dir = root_dir();
    let up = upstream(dir.path(), "x");
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let missing = dir.path().join("nothing-here");
    let d = Daemon::start(&[("secrets.toml", &policy(&up, &missing, &out, &py))]);
    let tools = d.cordon(&["tools", "--all"]);
    let text = format!("{}{}", tools.stdout, tools.stderr);
    assert!(text.contains("secret \"api\" (API_TOKEN)") && text.contains("does not exist"), "{text}");
    let check = d.cordon(&["policy", "check", d.policies.to_str().unwrap()]);
    let text = format!("{}{}", check.stdout, check.stderr);
    assert!(text.contains("does not exist"), "{text}");
}

/// THE PROOF. curl and Python requests reach an upstream that accepts only the real token, with
/// only the placeholder in their environment; the value is nowhere they or the agent can look.
#[test]
fn curl_and_python_requests_authenticate_with_a_token_they_never_see() {
    let Some(py) = usable() else { return };
    let metrics_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let metrics = format!("127.0.0.1:{metrics_port}");
    let s = setup(&py, &["--metrics", &metrics]);

    // curl, the header from the environment.
    let r = run(&s.d, "curl-api", &json!({}));
    assert_eq!((r["exit_code"].as_i64(), r["stdout"].as_str()), (Some(0), Some("token ok\n")), "{r:#}");
    // Python requests.
    let r = run(&s.d, "py-api", &json!({}));
    assert_eq!((r["exit_code"].as_i64(), r["stdout"].as_str()), (Some(0), Some("200 token ok\n")), "{r:#}");
    let seen = std::fs::read_to_string(s.out.join("seen.txt")).unwrap();
    let placeholder = placeholder_of(&seen);
    assert!(seen.contains(&format!("API_TOKEN={placeholder}")), "the placeholder is what the tool holds: {seen}");
    {
        let heads = s.up.heads.lock().unwrap();
        // The evidence, for `--nocapture` (the closing note quotes it).
        eprintln!("tool's environment: API_TOKEN={placeholder}");
        eprintln!("upstream received (curl, then requests):\n{}", heads.join("---\n"));
        for h in heads.iter() {
            assert!(h.contains(&format!("Bearer {}", s.value)), "the upstream got the real token: {h}");
            assert!(!h.contains("cordon-secret-"), "and never a placeholder: {h}");
        }
    }

    // Rotation: a new value in the source serves the next call, without a restart.
    let rotated = token("rotated-token-");
    write_secret(&s.source, &rotated);
    *s.up.expected.lock().unwrap() = rotated.clone();
    let r = run(&s.d, "curl-api", &json!({}));
    assert_eq!(r["stdout"], json!("token ok\n"), "the rotated value: {r:#}");
    assert!(s.up.heads.lock().unwrap().last().unwrap().contains(&rotated));

    // The leak scan, on a Python requests call held open after its request.
    let call = s.d.cordon_spawn(&["run", "py-api", "--args-json", r#"{"hold":"hold"}"#, "--json"]);
    assert!(cordon_tests::eventually(Duration::from_secs(30), || s.out.join("ready").exists()), "{}", s.d.log_text());
    let seen = std::fs::read_to_string(s.out.join("seen.txt")).unwrap();
    let placeholder = placeholder_of(&seen);
    let pid = tool_pid(&placeholder).expect("the held tool's process");
    let scan = leak_scan(pid, &placeholder, &rotated);
    std::fs::write(s.out.join("done"), "").unwrap();
    let output = call.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(stdout.contains("200 token ok"), "{stdout}");
    scan.assert_clean();

    // The value is in none of what the tool wrote or printed, the audit log, cordond's log,
    // the metrics, an MCP result.
    for value in [&s.value, &rotated] {
        for (path, bytes) in files_under(&s.out) {
            assert!(!contains(&bytes, value), "{} holds the value", path.display());
        }
        assert!(!stdout.contains(value.as_str()));
        let audit = std::fs::read_to_string(&s.d.audit).unwrap();
        assert!(!audit.contains(value.as_str()), "the audit log holds the value");
        assert!(audit.contains("\"tool\":\"curl-api\""), "the audit log was read");
        assert!(!s.d.log_text().contains(value.as_str()), "cordond's log holds the value");
    }
    let token_file = s.d.audit.parent().unwrap().join("metrics.token");
    let bearer = std::fs::read_to_string(&token_file).unwrap();
    let scraped = Command::new(CURL)
        .args(["-sS", "--max-time", "10", "-H", &format!("Authorization: Bearer {}", bearer.trim())])
        .arg(format!("http://{metrics}/metrics"))
        .output()
        .unwrap();
    let scraped = String::from_utf8_lossy(&scraped.stdout).to_string();
    assert!(scraped.contains("cordon_"), "{scraped}");
    assert!(!scraped.contains(&s.value) && !scraped.contains(&rotated), "the metrics hold the value");

    // The placeholder anywhere else is refused as an exfiltration attempt, and audited by the
    // secret's name and the place, never a value; nothing reaches the upstream.
    let before = s.up.heads.lock().unwrap().len();
    let r = run(&s.d, "exfil", &json!({}));
    let out = r["stdout"].as_str().unwrap();
    assert_eq!(out.matches("X-Cordon-Refused: exfiltration").count(), 2, "{r:#}");
    assert_eq!(s.up.heads.lock().unwrap().len(), before, "nothing reached the upstream");
    let id = r["invocation_id"].as_str().unwrap();
    eprintln!("exfil's curl saw:\n{out}");
    let refusals: Vec<Value> =
        s.d.audit_records().into_iter().filter(|a| a["id"] == id && a["why"] == "exfiltration").collect();
    assert_eq!(refusals.len(), 2, "{refusals:#?}");
    for a in &refusals {
        eprintln!("audit: {a}");
        assert_eq!(a["secret"], json!("api"), "{a}");
        assert!(!a.to_string().contains(&rotated), "{a}");
    }

    let mut mcp = cordon_tests::mcp_lines::Session::start(&s.d.socket);
    let result = mcp.call("curl-api", json!({}));
    let text = result.to_string();
    assert!(text.contains("token ok"), "{text}");
    assert!(!text.contains(&rotated) && !text.contains(&s.value), "the MCP result holds the value");
}

/// Where the value was found, if anywhere.
struct Scan {
    found: Vec<String>,
    placeholder_seen: Vec<String>,
}

impl Scan {
    fn assert_clean(&self) {
        assert!(self.found.is_empty(), "the real value is in the tool's {:?}", self.found);
        // The scan reads what it claims to: the placeholder is in environ, memory and the dump.
        for place in ["environ", "memory", "core dump"] {
            assert!(
                self.placeholder_seen.iter().any(|p| p == place),
                "placeholder not seen in {place}: {:?}",
                self.placeholder_seen
            );
        }
    }
}

/// The process whose environment holds `placeholder`.
fn tool_pid(placeholder: &str) -> Option<i32> {
    for e in std::fs::read_dir("/proc").ok()? {
        let Ok(pid) = e.ok()?.file_name().to_string_lossy().parse::<i32>() else { continue };
        if let Ok(env) = std::fs::read(format!("/proc/{pid}/environ"))
            && contains(&env, &format!("API_TOKEN={placeholder}"))
        {
            return Some(pid);
        }
    }
    None
}

/// Reads the tool's environ, cmdline, every readable mapping and a gcore dump.
fn leak_scan(pid: i32, placeholder: &str, value: &str) -> Scan {
    let mut scan = Scan { found: Vec::new(), placeholder_seen: Vec::new() };
    let mut look = |place: &str, bytes: &[u8]| {
        if contains(bytes, value) {
            scan.found.push(place.to_string());
        }
        if contains(bytes, placeholder) {
            scan.placeholder_seen.push(place.to_string());
        }
    };
    look("environ", &std::fs::read(format!("/proc/{pid}/environ")).unwrap());
    look("cmdline", &std::fs::read(format!("/proc/{pid}/cmdline")).unwrap());
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut memory = Vec::new();
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (range, perms) = (fields.next().unwrap(), fields.next().unwrap());
        if !perms.starts_with('r') {
            continue;
        }
        let (lo, hi) = range.split_once('-').unwrap();
        let (lo, hi) = (u64::from_str_radix(lo, 16).unwrap(), u64::from_str_radix(hi, 16).unwrap());
        let mut buf = vec![0u8; usize::try_from(hi - lo).unwrap()];
        if std::os::unix::fs::FileExt::read_exact_at(&mem, &mut buf, lo).is_ok() {
            memory.extend_from_slice(&buf);
        }
    }
    assert!(memory.len() > 1 << 20, "read {} bytes of the tool's memory", memory.len());
    look("memory", &memory);
    drop(memory);
    if Path::new("/usr/bin/gcore").exists() {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("core");
        let out = Command::new("/usr/bin/gcore").arg("-o").arg(&prefix).arg(pid.to_string()).output().unwrap();
        let core = dir.path().join(format!("core.{pid}"));
        assert!(core.exists(), "gcore: {}", String::from_utf8_lossy(&out.stderr));
        look("core dump", &std::fs::read(&core).unwrap());
    } else {
        skip!(Skip::MissingTool("/usr/bin/gcore"), "the core dump of the tool");
        scan.placeholder_seen.push("core dump".into());
    }
    scan
}

/// nobody's uid and primary gid.
fn nobody() -> (u32, u32) {
    let u = nix::unistd::User::from_name("nobody").unwrap().expect("an account nobody");
    (u.uid.as_raw(), u.gid.as_raw())
}

/// The file form: the tool reads its placeholder from a file of its private temp space, mode
/// 0400, owned by the identity it runs as (`run_as = "nobody"`), holding exactly the placeholder (no newline), named by
/// the variable; curl sends it in a header (`$(cat "$API_TOKEN_FILE")`) and the upstream gets the
/// real token. The value is in nothing the tool printed, the audit log or cordond's log; the
/// file went with the call's temp space; `cordon tool` shows the variable, the secret and "file".
#[test]
fn the_file_form_puts_the_placeholder_in_a_0400_file_of_the_calls_temp_space() {
    let Some(py) = usable() else { return };
    let s = setup(&py, &[]);
    let r = run(&s.d, "file-api", &json!({}));
    let stdout = r["stdout"].as_str().unwrap();
    assert_eq!(r["exit_code"], json!(0), "{r:#}");
    let line = |key: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key}= in {stdout}"))
            .to_string()
    };
    let placeholder = placeholder_of(stdout);
    assert_eq!(line("content"), placeholder, "{stdout}");
    let me = line("me");
    assert_eq!(me, format!("{}:{}", nobody().0, nobody().1), "the tool runs as nobody (run_as): {stdout}");
    assert_eq!(
        line("file"),
        format!("400 {me} {}", placeholder.len()),
        "mode 0400, owned by the tool's identity, exactly the placeholder (no newline): {stdout}"
    );
    let path = line("path");
    assert!(path.ends_with("/cordon-secret-API_TOKEN_FILE"), "{stdout}");
    assert_eq!(line("env"), "0", "the placeholder is in the file only, not the environment: {stdout}");
    assert!(stdout.ends_with("token ok\n"), "the upstream got the real token: {stdout}");
    let head = s.up.heads.lock().unwrap().last().unwrap().clone();
    assert!(head.contains(&format!("Bearer {}", s.value)), "{head}");
    // The value is nowhere the tool or the agent can look.
    let text = r.to_string();
    assert!(!text.contains(&s.value), "the result holds the value");
    let audit = std::fs::read_to_string(&s.d.audit).unwrap();
    assert!(audit.contains("\"tool\":\"file-api\"") && !audit.contains(&s.value), "the audit log");
    assert!(!s.d.log_text().contains(&s.value), "cordond's log holds the value");
    // The file went with the call's temp space (a private /tmp, or a directory removed at the end).
    assert!(!Path::new(&path).exists() || path == "/tmp/cordon-secret-API_TOKEN_FILE", "{path} outlived the call");
    assert!(!Path::new("/tmp/cordon-secret-API_TOKEN_FILE").exists(), "the file is not on the host");
    // A fresh placeholder per call, in the file too.
    let again = run(&s.d, "file-api", &json!({}));
    assert_ne!(placeholder_of(again["stdout"].as_str().unwrap()), placeholder);
    // `cordon tool` shows the variable, the secret and that it is a file; never a value.
    let shown = s.d.cordon(&["tool", "file-api"]);
    let text = format!("{}{}", shown.stdout, shown.stderr);
    assert!(text.contains("API_TOKEN_FILE: the path of a file") && text.contains("\"api\""), "{text}");
    assert!(!text.contains(&s.value), "{text}");
    drop(s.dir);
}
