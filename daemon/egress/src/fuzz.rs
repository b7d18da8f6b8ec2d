//! The proxy's parsers on bytes, for the fuzz targets (`fuzz/`, through `cordon_daemon::fuzzing`)
//! and the regression tests of what they found; `#[doc(hidden)]`, not an API. Each entry point runs the code the proxy runs on a
//! connection, with the connection replaced by the bytes given.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use cordon_core::egress::Target;

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
