//! OTLP/gRPC: each record an OpenTelemetry `LogRecord` in an `ExportLogsServiceRequest`.
//!
//! The body is the record's line exactly as it is on disk (so a remote store recomputes each
//! line's SHA-256 and checks it against the next record's `prev`); the attributes repeat what a
//! query filters on (`cordon.seq`, `cordon.decision`, `cordon.tool`, `cordon.caller.uid`,
//! `cordon.policy`, ...) and the chain fields (`cordon.prev`, `cordon.hash`). The resource says
//! whose log it is: `service.name` = `cordond`, `host.name`, `cordon.audit.path` and the chain's
//! identity (`cordon.audit.chain_id`, `cordon.audit.chain_start_seq`).
//!
//! This module and the tests are the only users of `cordon_proto::otlp`'s types.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::str::FromStr as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cordon_proto::otlp::collector::logs::v1::ExportLogsServiceRequest;
use cordon_proto::otlp::collector::logs::v1::logs_service_client::LogsServiceClient;
use cordon_proto::otlp::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use cordon_proto::otlp::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use cordon_proto::otlp::resource::v1::Resource;
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use cordon_core::policy::{Subject, Trust};

use super::reader::Line;
use super::{Context, ExportError, OtlpOptions, severity, unix_nanos};

/// How long one export may take (connecting included) before it counts as failed.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest CA or headers file read.
const MAX_FILE: u64 = 1024 * 1024;

#[derive(Debug)]
pub(super) struct Otlp {
    url: String,
    client: LogsServiceClient<Channel>,
    headers: Vec<(AsciiMetadataKey, AsciiMetadataValue)>,
}

impl Otlp {
    /// Checks the URL and files and prepares the channel (connected lazily: a collector that is
    /// down at startup is an outage like any other).
    pub(super) fn new(o: &OtlpOptions) -> Result<Otlp, ExportError> {
        let bad = |why: &str| ExportError::Url { url: o.url.clone(), why: why.to_string() };
        let uri = hyper::Uri::from_str(&o.url)
            .map_err(|e| bad(&format!("not a URL ({e}); give http://HOST:PORT or https://HOST:PORT")))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => {
                return Err(bad(
                    "the scheme must be http:// (plaintext) or https:// (TLS); OTLP/gRPC's port is usually 4317",
                ));
            }
        };
        let Some(authority) = uri.authority() else { return Err(bad("no host; give http://HOST:PORT")) };
        if authority.as_str().contains('@') {
            return Err(bad("credentials in the URL would be logged; give them in --audit-otlp-headers-file"));
        }
        if authority.port_u16().is_none() {
            return Err(bad("no port; the OTLP/gRPC port is usually 4317 (give http://HOST:4317)"));
        }
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return Err(bad("OTLP/gRPC takes no path or query; give http://HOST:PORT"));
        }
        let mut endpoint = Endpoint::from_shared(o.url.clone())
            .map_err(|e| bad(&e.to_string()))?
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(EXPORT_TIMEOUT)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(10));
        match (&o.ca, tls) {
            (Some(path), false) => {
                return Err(ExportError::Ca {
                    path: path.clone(),
                    why: "a CA is for https:// URLs; this one is http:// (plaintext)".into(),
                });
            }
            (Some(path), true) => {
                // Read as the TLS listener reads its CA (owner and mode on the whole path):
                // whoever can replace it can impersonate the collector, take each batch and
                // acknowledge it, so the records never reach the real one.
                let pem = trusted(path, Subject::OTLP_CA, false)
                    .map_err(|why| ExportError::Ca { path: path.clone(), why })?;
                if !pem.windows(27).any(|w| w == b"-----BEGIN CERTIFICATE-----") {
                    return Err(ExportError::Ca { path: path.clone(), why: "no PEM certificate in it".into() });
                }
                let config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem));
                endpoint = endpoint.tls_config(config).map_err(|e| bad(&e.to_string()))?;
            }
            (None, true) => {
                let config = ClientTlsConfig::new().with_native_roots();
                endpoint = endpoint.tls_config(config).map_err(|e| bad(&e.to_string()))?;
            }
            (None, false) => {}
        }
        let headers = match &o.headers {
            Some(path) => headers(path).map_err(|why| ExportError::Headers { path: path.clone(), why })?,
            None => Vec::new(),
        };
        let client = LogsServiceClient::new(endpoint.connect_lazy());
        Ok(Otlp { url: o.url.clone(), client, headers })
    }

    pub(super) fn url(&self) -> &str {
        &self.url
    }

    /// Sends one batch; `Ok(rejected)`: the collector took it (and says how many records it
    /// rejected for good: those are not retried, as OTLP says).
    pub(super) async fn send(&mut self, context: &Context, lines: &[Line]) -> Result<u64, String> {
        let mut request = tonic::Request::new(request(context, lines));
        for (k, v) in &self.headers {
            request.metadata_mut().insert(k.clone(), v.clone());
        }
        match self.client.export(request).await {
            Ok(response) => Ok(response
                .into_inner()
                .partial_success
                .map_or(0, |p| u64::try_from(p.rejected_log_records).unwrap_or(0))),
            Err(status) => Err(format!("{}: {:?}: {}", self.url, status.code(), status.message())),
        }
    }
}

fn string(key: &str, value: impl Into<String>) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(any_value::Value::StringValue(value.into())) }),
        ..Default::default()
    }
}

fn int(key: &str, value: u64) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(any_value::Value::IntValue(i64::try_from(value).unwrap_or(i64::MAX))) }),
        ..Default::default()
    }
}

/// The request for `lines`.
pub(super) fn request(context: &Context, lines: &[Line]) -> ExportLogsServiceRequest {
    let mut resource = vec![
        string("service.name", "cordond"),
        string("service.version", env!("CARGO_PKG_VERSION")),
        string("host.name", context.host.as_str()),
        string("cordon.audit.path", context.audit_path.as_str()),
    ];
    if let Some((id, at)) = &context.chain {
        resource.push(string("cordon.audit.chain_id", id.as_str()));
        resource.push(int("cordon.audit.chain_start_seq", *at));
    }
    let observed = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let records = lines.iter().map(|l| record(l, observed)).collect();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource { attributes: resource, ..Default::default() }),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: "cordond.audit".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                log_records: records,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

fn record(l: &Line, observed: u64) -> LogRecord {
    let decision = l.decision();
    let (number, _, text) = severity(decision);
    let mut attributes = vec![
        int("cordon.seq", l.seq),
        string("cordon.decision", decision),
        string("cordon.prev", l.text_field("prev").unwrap_or_default()),
        string("cordon.hash", cordon_core::audit::chain::hex(&l.hash)),
    ];
    for (key, field) in
        [("cordon.tool", "tool"), ("cordon.invocation.id", "id"), ("cordon.policy", "policy"), ("cordon.code", "code")]
    {
        if let Some(v) = l.text_field(field) {
            attributes.push(string(key, v));
        }
    }
    if let Some(uid) = l.caller_uid() {
        attributes.push(int("cordon.caller.uid", uid));
    }
    LogRecord {
        time_unix_nano: l.text_field("time").and_then(unix_nanos).unwrap_or(0),
        observed_time_unix_nano: observed,
        severity_number: number,
        severity_text: text.into(),
        body: Some(AnyValue { value: Some(any_value::Value::StringValue(l.text.to_string())) }),
        attributes,
        event_name: format!("cordon.audit.{decision}"),
        ..Default::default()
    }
}

/// A file an admin gave, read as cordond reads policy files: every directory from `/` and the
/// file itself writable only by root or cordond's user, a regular file of at most [`MAX_FILE`]
/// bytes (with `private`, unreadable by others too).
fn trusted(path: &Path, subject: Subject, private: bool) -> Result<Vec<u8>, String> {
    cordon_core::policy::trust::read_trusted_file(path, Trust::current(), subject, MAX_FILE, private)
        .map_err(|e| e.to_string())
}

/// `key=value` lines (`#` comments and blank lines skipped), from a file only its owner (root or
/// cordond's user) can read: these are a collector's credentials.
fn headers(path: &Path) -> Result<Vec<(AsciiMetadataKey, AsciiMetadataValue)>, String> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| e.to_string())?;
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me && meta.uid() != 0 {
        return Err(format!("it belongs to uid {}, not to root or cordond's uid {me}", meta.uid()));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "others can read or write it (mode {:o}) and it holds credentials: `chmod 600 {}`",
            meta.mode() & 0o7777,
            path.display()
        ));
    }
    // The whole path as well: a directory someone else can write lets them swap the file.
    let text =
        String::from_utf8(trusted(path, Subject::OTLP_HEADERS, true)?).map_err(|_| "not UTF-8 text".to_string())?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            return Err(format!("line {}: not key=value", n + 1));
        };
        let key = AsciiMetadataKey::from_str(&k.trim().to_ascii_lowercase())
            .map_err(|_| format!("line {}: {:?} is no gRPC metadata key", n + 1, k.trim()))?;
        let value = AsciiMetadataValue::from_str(v.trim())
            .map_err(|_| format!("line {}: the value is not printable ASCII", n + 1))?;
        out.push((key, value));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(url: &str) -> OtlpOptions {
        OtlpOptions { url: url.into(), ca: None, headers: None }
    }

    fn refusal(url: &str) -> String {
        match Otlp::new(&options(url)) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{url} accepted"),
        }
    }

    #[tokio::test]
    async fn urls_are_checked_before_anything_is_sent() {
        assert!(Otlp::new(&options("http://127.0.0.1:4317")).is_ok());
        assert!(refusal("ftp://collector:4317").contains("the scheme must be http:// (plaintext) or https:// (TLS)"));
        assert!(refusal("collector:4317").contains("the scheme must be"));
        assert!(refusal("http://collector").contains("no port"));
        assert!(refusal("http://user:pw@collector:4317").contains("credentials in the URL"));
        assert!(refusal("http://collector:4317/v1/logs").contains("no path or query"));
        let ca = OtlpOptions { ca: Some("/nonexistent".into()), ..options("http://c:4317") };
        assert!(Otlp::new(&ca).unwrap_err().to_string().contains("a CA is for https:// URLs"));
        let ca = OtlpOptions { ca: Some("/nonexistent".into()), ..options("https://c:4317") };
        assert!(Otlp::new(&ca).unwrap_err().to_string().starts_with("--audit-otlp-ca /nonexistent: "));
    }

    #[test]
    fn headers_are_secret_and_well_formed() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h");
        std::fs::write(&path, "# collector auth\nAuthorization=Bearer abc\n\nx-tenant = blue\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(headers(&path).unwrap_err().contains("chmod 600"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let h = headers(&path).unwrap();
        assert_eq!(h.len(), 2);
        assert_eq!(h[0].0.as_str(), "authorization");
        assert_eq!(h[1].1.to_str().unwrap(), "blue");
        std::fs::write(&path, "no equals sign\n").unwrap();
        assert_eq!(headers(&path).unwrap_err(), "line 1: not key=value");
    }

    /// Attack: the collector's CA or headers file sits where another account can write (the file
    /// itself, or a directory above it). Whoever writes the CA can stand in for the collector and
    /// acknowledge every batch it then drops (the cursor moves on, the SIEM never sees them);
    /// whoever owns the directory of the headers file can swap it. Both are refused at startup,
    /// as the TLS listener refuses its CA.
    #[tokio::test]
    async fn a_ca_or_headers_file_someone_else_can_write_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        if !nix::unistd::geteuid().is_root() {
            // cordon_tests::Skip::NotRoot: CI runs as root, so it fails there.
            assert!(
                std::env::var_os("CORDON_CI").is_none(),
                "SKIPPED a_ca_or_headers_file_someone_else_can_write_is_refused [not root] (CORDON_CI is set: CI runs as root)"
            );
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED a_ca_or_headers_file_someone_else_can_write_is_refused [not root]"
            );
            return;
        }
        let nobody = Some(nix::unistd::Uid::from_raw(65534));
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(vec!["collector".to_string()]).unwrap();
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let pem = p.self_signed(&key).unwrap().pem();
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, &pem).unwrap();
        std::fs::set_permissions(&ca, std::fs::Permissions::from_mode(0o644)).unwrap();
        let with_ca = OtlpOptions { ca: Some(ca.clone()), ..options("https://127.0.0.1:4317") };
        assert!(Otlp::new(&with_ca).is_ok());
        nix::unistd::chown(&ca, nobody, None).unwrap();
        let e = Otlp::new(&with_ca).unwrap_err().to_string();
        assert!(e.starts_with(&format!("--audit-otlp-ca {}: OTLP CA file", ca.display())), "{e}");
        assert!(e.contains("owned by"), "{e}");
        // The headers file: root's, 0600, but in a directory another account owns.
        let theirs = dir.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o755)).unwrap();
        let h = theirs.join("headers");
        std::fs::write(&h, "authorization=Bearer abc\n").unwrap();
        std::fs::set_permissions(&h, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(headers(&h).unwrap().len(), 1);
        nix::unistd::chown(&theirs, nobody, None).unwrap();
        let e = headers(&h).unwrap_err();
        assert!(e.contains("owned by"), "{e}");
        assert!(e.contains(&theirs.display().to_string()), "{e}");
    }

    #[test]
    fn a_record_carries_its_line_and_chain_fields() {
        let text = r#"{"seq":7,"time":"2026-11-22T04:25:00.123456Z","decision":"denied","tool":"t","caller":{"uid":1000,"gid":1000,"pid":5},"policy":"ab","prev":"00"}"#;
        let line = Line {
            seq: 7,
            text: text.into(),
            hash: cordon_core::audit::chain::line_hash(text.as_bytes()),
            value: serde_json::from_str(text).unwrap(),
        };
        let context = Context { host: "h".into(), audit_path: "/a".into(), chain: Some(("cd".into(), 1)) };
        let req = request(&context, std::slice::from_ref(&line));
        let rl = &req.resource_logs[0];
        let res = &rl.resource.as_ref().unwrap().attributes;
        assert!(res.iter().any(|kv| kv.key == "service.name"));
        assert!(res.iter().any(|kv| kv.key == "cordon.audit.chain_id"));
        let r = &rl.scope_logs[0].log_records[0];
        assert_eq!(r.severity_number, 13);
        assert_eq!(r.time_unix_nano, 1_795_321_500_123_456_000);
        assert_eq!(r.body.as_ref().unwrap().value, Some(any_value::Value::StringValue(text.into())));
        let keys: Vec<&str> = r.attributes.iter().map(|kv| kv.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "cordon.seq",
                "cordon.decision",
                "cordon.prev",
                "cordon.hash",
                "cordon.tool",
                "cordon.policy",
                "cordon.caller.uid"
            ]
        );
    }
}
