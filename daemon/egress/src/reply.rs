//! The proxy's own answers, in both protocols: a request it could not read ([`Bad`], and how
//! to answer it), the HTTP answers (a refusal with its `X-Cordon-Refused` kind, `200 Connection
//! established`) and the SOCKS5 replies (RFC 1928's codes). A leaf: the readers of both
//! protocols and the proxy answer through it.

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The SOCKS protocol version, the first byte of every SOCKS5 greeting and reply.
pub(crate) const SOCKS_VERSION: u8 = 5;

/// RFC 1928's reply codes.
pub(crate) mod socks_code {
    pub(crate) const SUCCEEDED: u8 = 0;
    pub(crate) const GENERAL_FAILURE: u8 = 1;
    /// "Connection not allowed by ruleset".
    pub(crate) const NOT_ALLOWED: u8 = 2;
    pub(crate) const HOST_UNREACHABLE: u8 = 4;
    pub(crate) const REFUSED: u8 = 5;
    pub(crate) const COMMAND_NOT_SUPPORTED: u8 = 7;
    pub(crate) const ADDRESS_NOT_SUPPORTED: u8 = 8;
}

/// A request the proxy could not read, and how to answer it.
#[derive(Debug)]
pub(crate) struct Bad {
    pub(crate) reply: Reply,
    pub(crate) message: String,
}

#[derive(Debug)]
pub(crate) enum Reply {
    /// An HTTP status with the message as its body.
    Http(u16),
    /// A SOCKS5 reply code.
    Socks(u8),
    /// Answered already (a SOCKS method refusal): recorded, nothing more to send.
    Answered,
    /// The client went away or failed: nothing to answer, nothing worth a record.
    Silent,
}

impl Bad {
    pub(crate) fn http(status: u16, message: impl Into<String>) -> Bad {
        Bad { reply: Reply::Http(status), message: message.into() }
    }

    pub(crate) fn socks(code: u8, message: impl Into<String>) -> Bad {
        Bad { reply: Reply::Socks(code), message: message.into() }
    }

    pub(crate) fn closed() -> Bad {
        Bad { reply: Reply::Silent, message: "the client closed the connection before its request".into() }
    }

    pub(crate) fn io(e: &std::io::Error) -> Bad {
        Bad { reply: Reply::Silent, message: format!("reading the request: {e}") }
    }

    /// Nothing to answer and nothing to record.
    pub(crate) fn silent(&self) -> bool {
        matches!(self.reply, Reply::Silent)
    }

    pub(crate) async fn answer(&self, client: &mut TcpStream) {
        match self.reply {
            Reply::Http(status) => {
                refused(client, status, "invalid-request", &format!("cordon: {}\n", self.message)).await
            }
            Reply::Socks(code) => socks(client, code).await,
            Reply::Answered | Reply::Silent => {}
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "Connection established",
        400 => "Bad Request",
        403 => "Forbidden",
        408 => "Request Timeout",
        411 => "Length Required",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// Answers with `status`, a text body and `X-Cordon-Refused: kind`, then closes.
pub(crate) async fn refused(client: &mut TcpStream, status: u16, kind: &str, body: &str) {
    let response = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
         X-Cordon-Refused: {kind}\r\nConnection: close\r\n\r\n{body}",
        reason(status),
        body.len()
    );
    // Best effort: the client may be gone.
    let _ = client.write_all(response.as_bytes()).await;
    let _ = client.shutdown().await;
}

/// Answers a `CONNECT` that is connected.
pub(crate) async fn established(client: &mut TcpStream) -> std::io::Result<()> {
    client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await
}

/// Sends a SOCKS5 reply (bound address 0.0.0.0:0: the tool has no use for cordond's); any code
/// but [`socks_code::SUCCEEDED`] closes the connection.
pub(crate) async fn socks(client: &mut TcpStream, code: u8) {
    let _ = socks_send(client, code).await;
    if code != socks_code::SUCCEEDED {
        let _ = client.shutdown().await;
    }
}

/// Sends a SOCKS5 reply, saying whether it was sent.
pub(crate) async fn socks_send(client: &mut TcpStream, code: u8) -> std::io::Result<()> {
    client.write_all(&[SOCKS_VERSION, code, 0, 1, 0, 0, 0, 0, 0, 0]).await
}
