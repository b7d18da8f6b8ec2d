//! `cordon --remote https://HOST:PORT --cert FILE --key FILE --ca FILE`: a cordond on another
//! host, over TCP with mutual TLS (cordond's `--listen-tls`).
//!
//! The flags are global: every subcommand that talks to a daemon (and `cordon mcp`) talks to the
//! remote one. They are read once at start ([`Remote::load`]) into the
//! [`crate::endpoint::Endpoint`] every command is given; [`crate::api::Client`] connects through
//! [`Remote::connect`] when that endpoint is a remote one. TLS 1.3 only; the daemon's certificate
//! is checked against `--ca` and the host name or address of the URL.
//!
//! What goes wrong is said in words ([`explain`]): a file that holds no certificate or key, a
//! daemon whose certificate does not match, a daemon that refused this client's certificate
//! (in TLS 1.3 a client only learns that on its first read, so the refusal surfaces as the first
//! call's transport error, which [`explain`] recognises).

use std::error::Error as StdError;
use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{AlertDescription, CertificateError, ClientConfig, RootCertStore};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::error::CliError;

/// A remote daemon and how to reach it.
#[derive(Debug, Clone)]
pub struct Remote {
    /// As given (`https://build-1.example.com:7443`), for messages.
    pub url: String,
    host: String,
    port: u16,
    server_name: ServerName<'static>,
    config: Arc<ClientConfig>,
    cert: PathBuf,
    ca: PathBuf,
}

fn usage(message: String) -> CliError {
    CliError::Usage(message)
}

fn read(flag: &str, path: &Path) -> Result<Vec<u8>, CliError> {
    std::fs::read(path).map_err(|e| usage(format!("{flag} {}: cannot read it: {e}", path.display())))
}

fn certificates(flag: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, CliError> {
    let pem = read(flag, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| usage(format!("{flag} {}: not a PEM certificate file ({e})", path.display())))?;
    if certs.is_empty() {
        return Err(usage(format!(
            "{flag} {}: holds no PEM certificate (-----BEGIN CERTIFICATE-----); give the certificate file",
            path.display()
        )));
    }
    Ok(certs)
}

/// `https://HOST:PORT` (HOST a name, an IPv4 address or a bracketed IPv6 address).
fn parse_url(url: &str) -> Result<(String, u16), CliError> {
    let bad = |why: &str| {
        usage(format!("--remote {url:?}: {why}; write https://HOST:PORT, e.g. https://build-1.example.com:7443"))
    };
    let rest = match url.strip_prefix("https://") {
        Some(rest) => rest,
        None if url.starts_with("http://") => {
            return Err(bad("plain http: cordon reaches remote daemons over TLS only"));
        }
        None => return Err(bad("not an https:// URL")),
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains(['/', '?', '#', '@']) {
        return Err(bad("a daemon's address has no path, query or user"));
    }
    let (host, port) = rest.rsplit_once(':').ok_or_else(|| bad("no port"))?;
    let port: u16 =
        port.parse().ok().filter(|p| *p != 0).ok_or_else(|| bad("the port is no number from 1 to 65535"))?;
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    if host.is_empty() {
        return Err(bad("no host"));
    }
    Ok((host.to_string(), port))
}

impl Remote {
    /// Reads and checks the flags' files: the client certificate and its key (which others must
    /// not be able to read), the CA that signed the daemon's certificate.
    pub fn load(url: &str, cert: &Path, key: &Path, ca: &Path) -> Result<Remote, CliError> {
        let (host, port) = parse_url(url)?;
        let server_name = ServerName::try_from(host.clone())
            .map_err(|_| usage(format!("--remote {url:?}: {host:?} is no host name or address")))?;
        let chain = certificates("--cert", cert)?;
        let meta =
            std::fs::metadata(key).map_err(|e| usage(format!("--key {}: cannot read it: {e}", key.display())))?;
        if meta.mode() & 0o077 != 0 {
            return Err(usage(format!(
                "--key {}: others can read it (mode {:04o}); a private key must be yours alone: chmod 600 {}",
                key.display(),
                meta.mode() & 0o7777,
                key.display()
            )));
        }
        let key_der = PrivateKeyDer::from_pem_slice(&read("--key", key)?).map_err(|e| {
            usage(format!("--key {}: holds no PEM private key (PKCS#8, PKCS#1 or SEC1): {e}", key.display()))
        })?;
        let mut roots = RootCertStore::empty();
        for c in certificates("--ca", ca)? {
            roots.add(c).map_err(|e| usage(format!("--ca {}: not a usable CA certificate: {e}", ca.display())))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| CliError::Other(format!("TLS setup: {e}")))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key_der)
            .map_err(|e| {
                usage(format!(
                    "--cert {} and --key {} do not belong together ({e}); give the key of that certificate",
                    cert.display(),
                    key.display()
                ))
            })?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        config.resumption = rustls::client::Resumption::disabled();
        Ok(Remote {
            url: url.to_string(),
            host,
            port,
            server_name,
            config: Arc::new(config),
            cert: cert.to_path_buf(),
            ca: ca.to_path_buf(),
        })
    }

    /// Connects, completes the TLS handshake and waits for the daemon's first bytes (its HTTP/2
    /// SETTINGS, which it sends at once): in TLS 1.3 the client's handshake is over before the
    /// daemon has checked the client's certificate, and a refusal comes as an alert on the first
    /// read. Reading here makes it an error of the connect (see [`explain`]), before any request
    /// is sent; the bytes read are handed to HTTP/2 first.
    pub async fn connect(&self) -> io::Result<Primed> {
        let tcp = TcpStream::connect((self.host.as_str(), self.port)).await?;
        tcp.set_nodelay(true)?;
        let mut tls =
            tokio_rustls::TlsConnector::from(self.config.clone()).connect(self.server_name.clone(), tcp).await?;
        let mut first = vec![0u8; 4096];
        // A daemon that says nothing for this long is left to the HTTP/2 handshake's own timeout
        // (the read is cancel-safe: nothing is lost).
        let n = match tokio::time::timeout(FIRST_BYTES, tls.read(&mut first)).await {
            Ok(Ok(0)) => {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the daemon closed the connection at once"));
            }
            Ok(Ok(n)) => n,
            Ok(Err(e)) => return Err(e),
            Err(_) => 0,
        };
        first.truncate(n);
        Ok(Primed { first, at: 0, io: tls })
    }

    /// The error for a failure whose cause is TLS, in words; `None` when TLS is not the cause.
    pub(crate) fn explain(&self, e: &(dyn StdError + 'static)) -> Option<CliError> {
        let tls = tls_error(e)?;
        let (code, message) = match &tls {
            rustls::Error::AlertReceived(alert) => {
                let why = match alert {
                    AlertDescription::CertificateExpired => "it has expired: get a new one from the daemon's admin",
                    AlertDescription::UnknownCA => {
                        "it is not signed by the CA the daemon trusts (its --tls-client-ca): get one that is"
                    }
                    AlertDescription::CertificateRequired => "it was not sent",
                    AlertDescription::AccessDenied => {
                        "no identity is mapped to it: ask the daemon's admin to map its subject or a SAN to an account in \
                         the daemon's --tls-identities"
                    }
                    _ => "ask the daemon's admin to map it in the daemon's --tls-identities",
                };
                (
                    cordon_core::code::ErrorCode::CertificateRefused,
                    format!(
                        "the daemon at {} refused this client certificate ({}; TLS alert {alert:?}): {why}",
                        self.url,
                        self.cert.display()
                    ),
                )
            }
            rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            ) => (
                cordon_core::code::ErrorCode::ConnectFailed,
                format!(
                    "the daemon's certificate is not valid for {:?} ({tls}): connect by a name or address its \
                     certificate carries (see its subject alternative names)",
                    self.host
                ),
            ),
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer | CertificateError::BadSignature) => (
                cordon_core::code::ErrorCode::ConnectFailed,
                format!(
                    "the daemon at {} presented a certificate that --ca {} did not sign ({tls}): give the CA that signed \
                     the daemon's certificate",
                    self.url,
                    self.ca.display()
                ),
            ),
            other => (
                cordon_core::code::ErrorCode::ConnectFailed,
                format!("TLS with the daemon at {} failed: {other}", self.url),
            ),
        };
        Some(CliError::Refused { code, message })
    }
}

/// How long [`Remote::connect`] waits for the daemon's first bytes.
const FIRST_BYTES: Duration = Duration::from_secs(10);

/// A TLS stream whose first bytes were already read (by [`Remote::connect`]): they come first.
#[derive(Debug)]
pub struct Primed {
    first: Vec<u8>,
    at: usize,
    io: TlsStream<TcpStream>,
}

impl AsyncRead for Primed {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.first.len() {
            let n = buf.remaining().min(this.first.len() - this.at);
            buf.put_slice(&this.first[this.at..this.at + n]);
            this.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Primed {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// The rustls error under `e`, looking into `io::Error`s (whose `source` skips the error they
/// wrap).
fn tls_error(e: &(dyn StdError + 'static)) -> Option<rustls::Error> {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(t) = c.downcast_ref::<rustls::Error>() {
            return Some(t.clone());
        }
        if let Some(inner) = c.downcast_ref::<io::Error>().and_then(io::Error::get_ref)
            && let Some(found) = tls_error(inner)
        {
            return Some(found);
        }
        // An alert that reached hyper as text ("received fatal alert: AccessDenied").
        if let Some(name) = c.to_string().strip_prefix("received fatal alert: ")
            && let Some(alert) = (0..=u8::MAX).map(AlertDescription::from).find(|a| format!("{a:?}") == name)
        {
            return Some(rustls::Error::AlertReceived(alert));
        }
        cause = c.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_urls_with_a_host_and_port_are_accepted() {
        assert_eq!(parse_url("https://127.0.0.1:7443").unwrap(), ("127.0.0.1".into(), 7443));
        assert_eq!(parse_url("https://[::1]:7443/").unwrap(), ("::1".into(), 7443));
        assert_eq!(parse_url("https://build-1.example.com:1").unwrap(), ("build-1.example.com".into(), 1));
        for (url, why) in [
            ("http://127.0.0.1:7443", "plain http"),
            ("127.0.0.1:7443", "not an https:// URL"),
            ("https://127.0.0.1", "no port"),
            ("https://127.0.0.1:0", "the port is no number"),
            ("https://:7443", "no host"),
            ("https://a:7443/x", "no path"),
            ("https://u@a:7443", "no path, query or user"),
        ] {
            let e = parse_url(url).unwrap_err().to_string();
            assert!(e.contains(why), "{url}: {e}");
        }
    }

    #[test]
    fn a_tls_error_is_found_under_io_errors() {
        let inner = io::Error::other(rustls::Error::AlertReceived(AlertDescription::AccessDenied));
        let outer = io::Error::other(inner);
        assert_eq!(tls_error(&outer), Some(rustls::Error::AlertReceived(AlertDescription::AccessDenied)));
        assert_eq!(tls_error(&io::Error::other("plain")), None);
        let text = io::Error::new(io::ErrorKind::InvalidData, "received fatal alert: CertificateExpired");
        assert_eq!(tls_error(&text), Some(rustls::Error::AlertReceived(AlertDescription::CertificateExpired)));
    }
}
