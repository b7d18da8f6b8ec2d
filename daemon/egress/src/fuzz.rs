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
