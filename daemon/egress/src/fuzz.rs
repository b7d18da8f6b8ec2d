//! The proxy's parsers on bytes, for the fuzz targets (`fuzz/`, through `cordon_daemon::fuzzing`)
//! and the regression tests of what they found; `#[doc(hidden)]`, not an API. Each entry point runs the code the proxy runs on a
//! connection, with the connection replaced by the bytes given.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use cordon_core::egress::{RequestRules, Target};

use crate::reply::{Bad, SOCKS_VERSION};
use crate::request::{Request, clip, shown_host};
use crate::{http, sni, socks};

/// Runs a future over in-memory bytes to its end: such a reader is never pending, so a future
/// that is must be waiting for something that never comes (a hang, reported as such).
fn run<F: Future>(f: F) -> Option<F::Output> {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => Some(out),
        Poll::Pending => None,
    }
}

fn describe(read: Option<Result<Request, Bad>>) -> Result<String, String> {
    match read {
        None => Err("the parser waits for bytes after the end of its input".into()),
        Some(Err(bad)) => Err(format!("{:?}: {}", bad.reply, bad.message)),
        Some(Ok(request)) => {
            // What the proxy does next with the host, before any name is resolved.
            let target = Target::parse(&request.host);
            let shown = shown_host(&request.host);
            Ok(format!("{request:?} target={target:?} shown={shown} clip={}", clip(&request.host)))
        }
    }
}

/// A request on the proxy's port: SOCKS5 when the first byte says so, HTTP otherwise (as
/// `read_request` in the proxy decides); what was read, or why it was refused.
pub fn proxy_request(bytes: &[u8]) -> Result<String, String> {
    match bytes.first() {
        None => Err("no bytes".into()),
        Some(&SOCKS_VERSION) => {
            let mut stream = tokio::io::join(bytes, tokio::io::sink());
            describe(run(socks::read_request(&mut stream)))
        }
        Some(_) => {
            let mut stream = bytes;
            describe(run(http::read_request(&mut stream)))
        }
    }
}

/// The first flight of a tunnel as the SNI check reads it: the first prefix the check takes as
/// complete (a client sending a byte at a time), and the verdict on it and on the whole input.
pub fn tls_first_record(bytes: &[u8]) -> (String, String) {
    let first = (1..=bytes.len()).find(|&n| sni::complete(&bytes[..n])).unwrap_or(bytes.len());
    let early = sni::hello(&bytes[..first]);
    let whole = sni::hello(bytes);
    (format!("{early:?}"), format!("{whole:?}"))
}

/// A request head on a terminated connection to `api.test:443`, with two secrets bound there (a
/// header and a query placement) and one bound elsewhere: the head that goes upstream, or why
/// it is refused; then a response head to it, read the same bytes.
pub fn terminated_request(bytes: &[u8]) -> (Result<String, String>, Result<String, String>) {
    use cordon_core::secret::Placement;
    let secret = |name: &str, placeholder: &str, place: Placement, host: &str| crate::Secret {
        name: name.into(),
        placeholder: placeholder.into(),
        value: zeroize::Zeroizing::new(b"value\r\n".to_vec()),
        hosts: cordon_core::egress::parse_rule(host).into_iter().collect(),
        place,
    };
    let secrets = [
        secret("tok", "PH1", Placement::Header("authorization".into()), "api.test:443"),
        secret("key", "PH2", Placement::Query("k".into()), "api.test:443"),
        secret("pw", "PH3", Placement::BasicPassword, "other.test:443"),
    ];
    let scope = crate::substitute::Scope { secrets: &secrets, bound: vec![true, true, false] };
    let host = Target::Name("api.test".into());
    let request = match crate::substitute::request(bytes, &scope, &host, 443) {
        Ok(r) => Ok(format!("{} {:?} {:?} {}", r.method, r.body, r.secrets, String::from_utf8_lossy(&r.upstream))),
        Err(e) => Err(format!("{e:?}")),
    };
    let response = crate::substitute::response(bytes, "GET").map(|r| format!("{} {:?} {}", r.status, r.body, r.close));
    (request, response)
}

/// A request body framed by `Transfer-Encoding: chunked` as the proxy reads it (decoded, scanned
/// for the placeholder `PH1`, framed again): the bytes it sends on, or why it stopped.
pub fn chunked_body(bytes: &[u8]) -> Result<Vec<u8>, String> {
    run(crate::exchange::fuzz_chunked(bytes))
        .unwrap_or_else(|| Err("the copy waits for bytes after the end of its input".into()))
}

/// A request's method and target (`METHOD TARGET`, split at the first space; the rest of the
/// bytes are the target) against fixed request rules (GET, HEAD; `/repos/ORG/` and `/user`), as
/// the proxy checks each request to a host with rules: `Ok(allowed)`, or `Err` when an allowed
/// request breaks what the rules promise (its method is not listed, or its path, read by a
/// server that decodes percent escapes, takes backslashes for slashes, cuts `;` parameters and
/// normalises Unicode (NFKC) and resolves dot segments, is not beneath a prefix). The fuzz target panics on `Err`.
pub fn request_rules(bytes: &[u8]) -> Result<bool, String> {
    let text = String::from_utf8_lossy(bytes);
    let (method, target) = text.split_once(' ').unwrap_or((&text, ""));
    let rules =
        RequestRules { methods: vec!["GET".into(), "HEAD".into()], paths: vec!["/repos/ORG/".into(), "/user".into()] };
    if rules.check(method, target).is_err() {
        return Ok(false);
    }
    if !rules.methods.iter().any(|m| m == method) {
        return Err(format!("{method:?} allowed, but not listed"));
    }
    let path = target.split('?').next().unwrap_or_default();
    let seen = server_path(path);
    let beneath = |p: &str| {
        if p.ends_with('/') { seen.starts_with(p) } else { seen == p || seen.starts_with(&format!("{p}/")) }
    };
    if !rules.paths.iter().any(|p| beneath(p)) {
        return Err(format!("{target:?} allowed, but a lenient server reads the path {seen:?}"));
    }
    Ok(true)
}

/// `path` as the most lenient servers read it (see [`request_rules`]), with a trailing `/` kept.
fn server_path(path: &str) -> String {
    let mut decoded = Vec::new();
    let b = path.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let hex =
            b.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok()).and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b[i], hex) {
            (b'%', Some(d)) => {
                decoded.push(d);
                i += 3;
            }
            (c, _) => {
                decoded.push(c);
                i += 1;
            }
        }
    }
    let text = String::from_utf8_lossy(&decoded)
        .replace(['\u{FF0E}', '\u{2024}', '\u{FE52}'], ".")
        .replace('\u{2025}', "..")
        .replace('\u{2026}', "...")
        .replace(['\\', '\u{FF0F}', '\u{FF3C}', '\u{FE68}'], "/");
    let mut out: Vec<&str> = Vec::new();
    for segment in text.split('/') {
        let segment = segment.split(';').next().unwrap_or_default();
        let trimmed = segment.trim_end_matches(['.', ' ']);
        if segment.is_empty() || (trimmed.is_empty() && segment.len() == 1) {
            continue;
        }
        if trimmed.is_empty() {
            out.pop();
        } else {
            out.push(segment);
        }
    }
    let trailing = if text.ends_with('/') && !out.is_empty() { "/" } else { "" };
    format!("/{}{trailing}", out.join("/"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn terminated_seeds_are_read_as_the_proxy_reads_them() {
        let seed = |t: &str, n: &str| {
            std::fs::read(format!("{}/../../fuzz/corpus/{t}/{n}", env!("CARGO_MANIFEST_DIR"))).unwrap()
        };
        // The value holds a line break: it cannot go in a header, and the request says so.
        let (request, _) = terminated_request(&seed("terminated_request", "bearer-and-query"));
        assert!(request.unwrap_err().contains("line break"));
        let (_, response) = terminated_request(&seed("terminated_request", "response"));
        assert_eq!(response.unwrap(), "200 Length(5) false");
        let (request, _) = terminated_request(&seed("terminated_request", "basic-chunked"));
        assert!(request.unwrap_err().contains("the basic-auth password"), "bound elsewhere");
        assert_eq!(chunked_body(&seed("chunked_body", "split-placeholder")), Err("placeholder of tok".into()));
        // Framed again: the last bytes that could begin a placeholder come in a chunk of their own.
        let plain = chunked_body(&seed("chunked_body", "plain")).unwrap();
        assert_eq!(String::from_utf8(plain).unwrap(), "e\r\n0123456789abcd\r\n2\r\nef\r\n0\r\n\r\n");
    }

    #[test]
    fn request_rules_holds_for_the_seeds_and_the_attacks() {
        for (input, allowed) in [
            ("GET /repos/ORG/x", true),
            ("HEAD /user?x=/../admin", true),
            ("GET /user/keys", true),
            ("POST /repos/ORG/x", false),
            ("GET /repos/ORG/../other", false),
            ("GET /repos/ORG/%2e%2e/other", false),
            ("GET /repos/ORG%2fx", false),
            ("GET //repos/ORG/", false),
            ("GET /repos/ORGX", false),
            ("GET http://h/repos/ORG/x", false),
            ("get /repos/ORG/x", false),
            ("GET /repos/ORG/..;/x", false),
            ("GET /repos/ORG/%3b/../x", false),
            ("GET /repos/ORG/%c0%ae%c0%ae/x", false),
            ("GET /repos/ORG/%EF%BC%8E%EF%BC%8E/x", false),
            ("", false),
        ] {
            assert_eq!(request_rules(input.as_bytes()), Ok(allowed), "{input:?}");
        }
        for seed in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/corpus/request_rules")).unwrap()
        {
            let bytes = std::fs::read(seed.unwrap().path()).unwrap();
            assert!(request_rules(&bytes).is_ok(), "{:?}", String::from_utf8_lossy(&bytes));
        }
    }
}
