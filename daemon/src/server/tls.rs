//! The TLS listener (`cordond --listen-tls ADDR`): remote clients with mutual TLS.
//!
//! Every connection must complete a TLS 1.3 handshake (no other version, no session resumption)
//! in which the client presents a certificate that:
//!
//! 1. chains to `--tls-client-ca` and is valid now, for client authentication (rustls'
//!    `WebPkiClientVerifier`), and
//! 2. maps to exactly one identity of `--tls-identities` (see `crate::identities`).
//!
//! Both are decided inside the handshake by [`Mapping`], this listener's `ClientCertVerifier`: a
//! certificate that is absent, expired, signed by another CA or mapped to nothing fails the
//! handshake with a TLS alert, so no HTTP/2 frame, let alone an RPC, is ever read from it. Each
//! refusal is counted in the metrics (`cordon_tls_handshakes_refused_total{reason}`) and audited
//! as `unauthenticated` (operation `tls_handshake`, the peer's address, the certificate's subject
//! when it sent one, the reason) at a bounded rate per source: at most [`AUDITED_PER_WINDOW`] records per
//! [`AUDIT_WINDOW`], the rest summed up in one record with `suppressed` (as the Unix socket
//! bounds its refused peers), so a flood of bad handshakes cannot fill the log.
//!
//! A connection that passes becomes a [`Conn`] like a Unix one: its peer is the mapped account
//! (`Caller { pid: None, via: Certificate(label), groups: Some(..) }`, verdict `Outside`: there
//! is no local process to inspect, and the identity is what the certificate proved), under the
//! same HTTP/2 preface, silence and write-stall deadlines, with a slot in a per-identity count
//! ([`MAX_CONNECTIONS_PER_IDENTITY`]) apart from the Unix socket's per-uid counts. Before that,
//! every connection is accepted at once and its handshake takes a slot of its source's share
//! (`cordon_limit`): the local account owning the connecting socket for a loopback peer, else
//! the source address (an IPv6 /64 counts as one); [`MAX_HANDSHAKES_PER_ADDRESS`] per source,
//! [`MAX_HANDSHAKES`] in all, each within [`conn::HANDSHAKE_DEADLINE`]. A handshake that finds
//! no free slot waits in a fair, bounded queue (freed slots go round-robin over the sources
//! that wait, so one source's silent connections delay only that source's handshakes); one
//! refused (its source's queue full, or no slot within [`HANDSHAKE_WAIT`]) gets a TLS
//! `internal_error` alert and an audited refusal with the reason.
//!
//! Architecture invariant: this module is the only way a TCP connection reaches the server, and
//! it yields only connections whose certificate the [`Mapping`] verifier accepted in their own
//! handshake.

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use cordon_core::code::ErrorCode;
use cordon_core::policy::{Subject, Trust, TrustError};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;

use cordon_limit::{Limiter, LimiterLimits, Principal};

use super::metrics::TlsMetrics;
use crate::audit::Coalesce;

use super::conn::{self, Conn, Deadlines, Held, Io, Limits, Peer, Verdict};
use crate::audit::{Audit, Decision, Record};
use crate::identities::{self, CertNames, Identities, IdentitiesError, Identity, Rules};

/// Connections one mapped identity may have open at once.
pub(crate) const MAX_CONNECTIONS_PER_IDENTITY: usize = 256;

/// TLS handshakes in progress from one source address.
pub(crate) const MAX_HANDSHAKES_PER_ADDRESS: usize = 16;

/// TLS handshakes in progress in all.
pub(crate) const MAX_HANDSHAKES: usize = 256;

/// Handshakes waiting for a slot, from one source and in all, and how long each may wait.
pub(crate) const HANDSHAKE_QUEUE_PER_ADDRESS: usize = 256;
pub(crate) const HANDSHAKE_QUEUE: usize = 1024;
pub(crate) const HANDSHAKE_WAIT: Duration = Duration::from_secs(10);

/// Refused handshakes audited one by one per window; the rest are summed up.
pub(crate) const AUDITED_PER_WINDOW: u32 = 20;

/// The window of [`AUDITED_PER_WINDOW`].
pub(crate) const AUDIT_WINDOW: Duration = Duration::from_secs(60);

/// The largest certificate, key or CA file read.
const MAX_PEM_BYTES: u64 = 1024 * 1024;

/// `--listen-tls` and its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub listen: SocketAddr,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: PathBuf,
    pub identities: PathBuf,
}

/// Why the TLS listener cannot start.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error(transparent)]
    Untrusted(#[from] TrustError),
    #[error("{flag} {}: {why}", .path.display())]
    File { flag: &'static str, path: PathBuf, why: String },
    #[error("--tls-cert and --tls-key do not belong together: {0}; give the key of that certificate")]
    KeyMismatch(String),
    #[error(transparent)]
    Identities(#[from] IdentitiesError),
    #[error("cannot listen on --listen-tls {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
}

/// What the TLS listener serves with: the daemon's certificate and key, the client CA, the
/// identity mapping (replaced on reload).
pub(crate) struct Remote {
    options: Options,
    provider: Arc<CryptoProvider>,
    certified: Arc<CertifiedKey>,
    webpki: Arc<dyn ClientCertVerifier>,
    /// A certificate of `--tls-client-ca` carries name constraints (see [`constrained`]).
    constrained_anchor: bool,
    identities: RwLock<Arc<Identities>>,
    rules: Rules,
}

/// Whether a CA certificate carries a name constraints extension. rustls checks such constraints
/// against the `dNSName`s (and IP addresses) below it, never against a subject's common name, and
/// a URI only when the CA constrains URIs (then it refuses every one): a CA constrained to
/// `team.example` can still issue a certificate whose common name or URI is any mapped name. So
/// a chain in which a CA is constrained maps only by a dns name (a CA certificate that cannot be
/// parsed counts as constrained: fail closed).
fn constrained(der: &[u8]) -> bool {
    match x509_parser::parse_x509_certificate(der) {
        Ok((_, cert)) => !matches!(cert.name_constraints(), Ok(None)),
        Err(_) => true,
    }
}

impl fmt::Debug for Remote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Remote").field("options", &self.options).finish_non_exhaustive()
    }
}

fn read(path: &Path, subject: Subject, private: bool) -> Result<Vec<u8>, TlsError> {
    Ok(cordon_core::policy::trust::read_trusted_file(path, Trust::current(), subject, MAX_PEM_BYTES, private)?)
}

fn certificates(flag: &'static str, path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let file = |why: String| TlsError::File { flag, path: path.to_path_buf(), why };
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file(format!("not a PEM certificate file ({e})")))?;
    if certs.is_empty() {
        return Err(file("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into()));
    }
    Ok(certs)
}

impl Remote {
    /// Reads and checks every file (blocking): the key, the CA and the mapping as cordond reads
    /// policy files (and the key unreadable by others), the certificate as well.
    pub(crate) fn load(options: Options, admin_gid: Option<u32>) -> Result<Remote, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = certificates("--tls-cert", &options.cert, &read(&options.cert, Subject::TLS_CERT, false)?)?;
        let key_pem = read(&options.key, Subject::TLS_KEY, true)?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::File {
            flag: "--tls-key",
            path: options.key.clone(),
            why: format!("holds no PEM private key (PKCS#8, PKCS#1 or SEC1): {e}"),
        })?;
        let certified =
            CertifiedKey::from_der(chain, key, &provider).map_err(|e| TlsError::KeyMismatch(e.to_string()))?;
        let ca = certificates(
            "--tls-client-ca",
            &options.client_ca,
            &read(&options.client_ca, Subject::TLS_CLIENT_CA, false)?,
        )?;
        let mut roots = RootCertStore::empty();
        let constrained_anchor = ca.iter().any(|c| constrained(c));
        for cert in ca {
            roots.add(cert).map_err(|e| TlsError::File {
                flag: "--tls-client-ca",
                path: options.client_ca.clone(),
                why: format!("not a usable CA certificate: {e}"),
            })?;
        }
        let webpki =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build().map_err(|e| {
                TlsError::File { flag: "--tls-client-ca", path: options.client_ca.clone(), why: e.to_string() }
            })?;
        let rules = Rules::current(admin_gid);
        let identities = identities::load(&options.identities, Trust::current(), rules)?;
        Ok(Remote {
            options,
            provider,
            certified: Arc::new(certified),
            webpki,
            constrained_anchor,
            identities: RwLock::new(Arc::new(identities)),
            rules,
        })
    }

    pub(crate) fn options(&self) -> &Options {
        &self.options
    }

    /// The identities mapped now.
    pub(crate) fn identities(&self) -> Arc<Identities> {
        self.identities.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// A connection already open whose entry a reloaded mapping removed or changed has each
    /// further request refused (`CordonService::still_mapped`); a new handshake gets the new
    /// mapping. (`Daemon::reload` reads it with the other files and installs it only when all load.)
    /// Reads the mapping for a reload without putting it in force.
    pub(crate) fn read_identities(&self) -> Result<Identities, IdentitiesError> {
        identities::load(&self.options.identities, Trust::current(), self.rules)
    }

    /// Puts a mapping [`Remote::read_identities`] read in force; returns its entries.
    pub(crate) fn install_identities(&self, fresh: Identities) -> usize {
        let n = fresh.len();
        *self.identities.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(fresh);
        n
    }

    /// The mapping file (`--tls-identities`).
    pub(crate) fn identities_path(&self) -> &Path {
        &self.options.identities
    }

    /// The configuration of one handshake, whose verifier reports to `outcome`.
    fn server_config(&self, outcome: Arc<Mutex<Outcome>>) -> Result<Arc<ServerConfig>, rustls::Error> {
        let verifier = Arc::new(Mapping {
            inner: self.webpki.clone(),
            identities: self.identities(),
            constrained_anchor: self.constrained_anchor,
            outcome,
        });
        let mut config = ServerConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(verifier)
            .with_cert_resolver(Arc::new(Fixed(self.certified.clone())));
        config.alpn_protocols = vec![b"h2".to_vec()];
        // No resumption: every connection presents (and has checked) its certificate, against
        // the mapping in force when it connects.
        config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        config.send_tls13_tickets = 0;
        config.max_early_data_size = 0;
        Ok(Arc::new(config))
    }
}

/// The daemon's one certificate, whatever name the client asked for.
#[derive(Debug)]
struct Fixed(Arc<CertifiedKey>);

impl ResolvesServerCert for Fixed {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// What the verifier decided in one handshake.
#[derive(Debug, Default)]
enum Outcome {
    /// It was not asked (no certificate, or the handshake failed before).
    #[default]
    NotAsked,
    Mapped(Identity),
    Refused {
        subject: Option<String>,
        reason: Reason,
        detail: String,
    },
}

/// Why a handshake was refused: a fixed set (metric labels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    NoCertificate,
    Expired,
    UnknownIssuer,
    BadCertificate,
    Unmapped,
    NotTls,
    Handshake,
    Timeout,
    Limit,
}

impl Reason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reason::NoCertificate => "no_certificate",
            Reason::Expired => "expired",
            Reason::UnknownIssuer => "unknown_issuer",
            Reason::BadCertificate => "bad_certificate",
            Reason::Unmapped => "unmapped",
            Reason::NotTls => "not_tls",
            Reason::Handshake => "handshake",
            Reason::Timeout => "timeout",
            Reason::Limit => "limit",
        }
    }
}

/// The listener's client certificate verifier: the CA's chain check, then the mapping. Made for
/// each handshake (it reports what it decided to that handshake's [`Outcome`]).
struct Mapping {
    inner: Arc<dyn ClientCertVerifier>,
    identities: Arc<Identities>,
    /// See [`constrained`].
    constrained_anchor: bool,
    outcome: Arc<Mutex<Outcome>>,
}

impl fmt::Debug for Mapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mapping").field("identities", &self.identities.len()).finish_non_exhaustive()
    }
}

impl Mapping {
    fn set(&self, outcome: Outcome) {
        *self.outcome.lock().unwrap_or_else(|p| p.into_inner()) = outcome;
    }

    fn decide(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        verified: Result<(), rustls::Error>,
    ) -> Result<Identity, Outcome> {
        let names = CertNames::of(end_entity);
        let subject = names.as_ref().map(|n| n.subject.clone());
        if let Err(e) = verified {
            let reason = match &e {
                rustls::Error::InvalidCertificate(
                    CertificateError::Expired | CertificateError::ExpiredContext { .. },
                )
                | rustls::Error::InvalidCertificate(
                    CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. },
                ) => Reason::Expired,
                rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => Reason::UnknownIssuer,
                _ => Reason::BadCertificate,
            };
            return Err(Outcome::Refused { subject, reason, detail: e.to_string() });
        }
        let Some(names) = names else {
            return Err(Outcome::Refused {
                subject: None,
                reason: Reason::BadCertificate,
                detail: "the certificate cannot be parsed".into(),
            });
        };
        let identity = self.identities.lookup(&names).cloned().map_err(|e| Outcome::Refused {
            subject: subject.clone(),
            reason: Reason::Unmapped,
            detail: e.to_string(),
        })?;
        if !identity.by_dns() && (self.constrained_anchor || intermediates.iter().any(|c| constrained(c))) {
            return Err(Outcome::Refused {
                subject,
                reason: Reason::Unmapped,
                detail: format!(
                    "it matched {}, but a CA of its chain is name-constrained, and rustls checks name constraints \
                     only against dns names (a constrained CA could issue any common name or uri): under such a CA, \
                     map a dns name of the certificate",
                    identity.label
                ),
            });
        }
        Ok(identity)
    }
}

impl ClientCertVerifier for Mapping {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self.inner.verify_client_cert(end_entity, intermediates, now).map(|_| ());
        let error = verified.as_ref().err().cloned();
        match self.decide(end_entity, intermediates, verified) {
            Ok(identity) => {
                self.set(Outcome::Mapped(identity));
                Ok(ClientCertVerified::assertion())
            }
            Err(outcome) => {
                self.set(outcome);
                // The chain's own error when it failed (expired, unknown issuer: the client
                // hears the matching alert); "access denied" when it is fine but mapped to
                // nothing.
                Err(error
                    .unwrap_or(rustls::Error::InvalidCertificate(CertificateError::ApplicationVerificationFailure)))
            }
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Binds `--listen-tls`.
pub(crate) async fn bind(remote: &Remote) -> Result<TcpListener, TlsError> {
    let addr = remote.options.listen;
    TcpListener::bind(addr).await.map_err(|source| TlsError::Bind { addr, source })
}

/// The listener's connections whose client certificate mapped to an identity, each under the
/// deadlines and limits of `conn`. Handshakes run concurrently (a slow one holds up no other).
pub(crate) fn incoming(
    listener: TcpListener,
    remote: Arc<Remote>,
    audit: Arc<Audit>,
    metrics: Option<Arc<TlsMetrics>>,
) -> impl Stream<Item = io::Result<Conn>> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(accept_loop(listener, remote, audit, metrics, tx));
    ReceiverStream::new(rx)
}

async fn accept_loop(
    listener: TcpListener,
    remote: Arc<Remote>,
    audit: Arc<Audit>,
    metrics: Option<Arc<TlsMetrics>>,
    tx: mpsc::Sender<io::Result<Conn>>,
) {
    let handshakes: Arc<Limiter<Principal>> = Arc::new(Limiter::new(LimiterLimits {
        per_key: MAX_HANDSHAKES_PER_ADDRESS,
        global: MAX_HANDSHAKES,
        queue_per_key: HANDSHAKE_QUEUE_PER_ADDRESS,
        queue: HANDSHAKE_QUEUE,
        wait: HANDSHAKE_WAIT,
    }));
    let per_identity: Arc<Limits<Arc<str>>> = Arc::new(Limits::named(MAX_CONNECTIONS_PER_IDENTITY, "identity"));
    let refusals = Arc::new(Refusals::new(audit, metrics));
    loop {
        let (stream, addr) = tokio::select! {
            () = tx.closed() => return,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // EMFILE and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "TLS listener: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        // Small gRPC frames go out at once (no Nagle delay on a request's answer).
        let _ = stream.set_nodelay(true);
        let (remote, tx, refusals, per_identity, handshakes) =
            (remote.clone(), tx.clone(), refusals.clone(), per_identity.clone(), handshakes.clone());
        tokio::spawn(async move {
            // Accepted first; the handshake's slot comes from the share of whoever connected.
            let from = match stream.local_addr() {
                Ok(local) => cordon_limit::peer::of_tcp(local, addr),
                Err(_) => Principal::Addr(source(addr.ip())),
            };
            let _pending = match handshakes.acquire(from).await {
                Ok(slot) => slot,
                Err(refused) => {
                    let detail = format!(
                        "too many TLS handshakes from {from} ({MAX_HANDSHAKES_PER_ADDRESS} at once per source, \
                         {MAX_HANDSHAKES} in all): {refused}"
                    );
                    refusals.refuse(from, addr, None, Reason::Limit, &detail);
                    refuse_with_alert(stream).await;
                    return;
                }
            };
            let outcome = Arc::new(Mutex::new(Outcome::NotAsked));
            let config = match remote.server_config(outcome.clone()) {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(error = %e, "TLS listener: cannot configure a handshake");
                    return;
                }
            };
            let acceptor = tokio_rustls::TlsAcceptor::from(config);
            let handshake = tokio::time::timeout(conn::HANDSHAKE_DEADLINE, acceptor.accept(stream)).await;
            let decided = std::mem::take(&mut *outcome.lock().unwrap_or_else(|p| p.into_inner()));
            match (handshake, decided) {
                (Ok(Ok(tls)), Outcome::Mapped(identity)) => {
                    let Some(slot) = per_identity.acquire(identity.label.clone()) else {
                        refusals.refuse(from, addr, None, Reason::Limit, "connection limit of this identity reached");
                        return;
                    };
                    let peer = Peer { caller: identity.caller(), verdict: Verdict::Outside };
                    tracing::debug!(%addr, identity = %identity.label, user = %identity.user, "TLS client connected");
                    let conn = Conn::wrap(Io::Tls(Box::new(tls)), peer, Held::Identity(slot), Deadlines::SERVER);
                    let _ = tx.send(Ok(conn)).await;
                }
                // Fail closed: a handshake that completed without the verifier mapping it.
                (Ok(Ok(_)), _) => {
                    refusals.refuse(
                        from,
                        addr,
                        None,
                        Reason::Handshake,
                        "completed without a mapped client certificate",
                    );
                }
                // The verifier's own account of it (the client heard the matching alert).
                (Ok(Err(_)), Outcome::Refused { subject, reason, detail }) => {
                    refusals.refuse(from, addr, subject.as_deref(), reason, &detail);
                }
                (Ok(Err(e)), _) => {
                    let (reason, detail) = classify(&e);
                    refusals.refuse(from, addr, None, reason, &detail);
                }
                (Err(_), _) => {
                    let detail = format!("no TLS handshake within {} s", conn::HANDSHAKE_DEADLINE.as_secs());
                    refusals.refuse(from, addr, None, Reason::Timeout, &detail);
                }
            }
        });
    }
}

/// Whom a source address counts against for [`MAX_HANDSHAKES_PER_ADDRESS`] when no local
/// account owns it: an IPv4 address (an IPv4-mapped IPv6 one as itself), or an IPv6 address's
/// /64, which one host usually holds whole (counted per address, it could open 2^64 times the
/// limit).
fn source(ip: IpAddr) -> IpAddr {
    cordon_limit::peer::source(ip)
}

/// A fatal TLS `internal_error` alert (a TLS 1.2-framed record, which every client reads before
/// its handshake), then close: the client learns it was refused rather than seeing a reset.
async fn refuse_with_alert(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt as _;
    const ALERT: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 80];
    let send = async {
        stream.write_all(&ALERT).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), send).await;
}

/// A failed handshake that the verifier did not see.
fn classify(e: &io::Error) -> (Reason, String) {
    let tls = e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match tls {
        Some(rustls::Error::NoCertificatesPresented) => {
            (Reason::NoCertificate, "the client sent no certificate".into())
        }
        Some(rustls::Error::InvalidMessage(_)) => (Reason::NotTls, format!("not a TLS client ({e})")),
        Some(other) => (Reason::Handshake, other.to_string()),
        None => (Reason::Handshake, e.to_string()),
    }
}

/// Refused handshakes: counted each, audited at a bounded rate per source (a local account, an
/// address): one source's flood spends its own records, never another's.
struct Refusals {
    audit: Arc<Audit>,
    metrics: Option<Arc<TlsMetrics>>,
    windows: Arc<Coalesce<Principal>>,
}

impl Refusals {
    fn new(audit: Arc<Audit>, metrics: Option<Arc<TlsMetrics>>) -> Refusals {
        Refusals { audit, metrics, windows: Arc::new(Coalesce::new(AUDITED_PER_WINDOW, AUDIT_WINDOW)) }
    }

    fn refuse(&self, from: Principal, addr: SocketAddr, subject: Option<&str>, reason: Reason, detail: &str) {
        if let Some(m) = &self.metrics {
            m.refused(reason.as_str());
        }
        tracing::info!(%addr, %from, subject, reason = reason.as_str(), detail, "TLS handshake refused");
        self.windows.record(
            &self.audit,
            from,
            || {
                let mut record = Record::new(Decision::Unauthenticated)
                    .with("operation", "tls_handshake")
                    .with("peer", addr.to_string())
                    .with("source", from.to_string())
                    .with("reason", reason.as_str());
                if let Some(subject) = subject {
                    record = record.with("subject", crate::audit::clip(subject));
                }
                record.error(ErrorCode::CertificateRefused, &format!("TLS client certificate refused: {detail}"))
            },
            move |suppressed| {
                Record::new(Decision::Unauthenticated)
                    .with("operation", "tls_handshake")
                    .with("source", from.to_string())
                    .with("suppressed", suppressed)
                    .error(
                        ErrorCode::CertificateRefused,
                        &format!(
                            "{suppressed} more TLS handshakes from {from} refused in {} s, beyond the \
                             {AUDITED_PER_WINDOW} recorded one by one (cordon_tls_handshakes_refused_total counts each)",
                            AUDIT_WINDOW.as_secs()
                        ),
                    )
            },
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, SanType};

    use super::*;
    use crate::identities::Accounts;

    /// bob is uid 1001, gid 1001; no other account exists.
    struct Bob;

    impl Accounts for Bob {
        fn user(&self, name: &str) -> Option<(u32, u32)> {
            (name == "bob").then_some((1001, 1001))
        }

        fn group(&self, _: &str) -> Option<u32> {
            None
        }

        fn groups_of(&self, _: &str, gid: u32) -> Vec<u32> {
            vec![gid]
        }
    }

    struct Ca {
        issuer: Issuer<'static, KeyPair>,
        der: CertificateDer<'static>,
    }

    fn new_ca(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, name);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let der = p.self_signed(&key).unwrap().der().clone();
        Ca { issuer: Issuer::new(p, key), der }
    }

    fn client(
        ca: &Ca,
        cn: &str,
        sans: Vec<SanType>,
        expired: bool,
        eku: ExtendedKeyUsagePurpose,
    ) -> CertificateDer<'static> {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.subject_alt_names = sans;
        p.extended_key_usages = vec![eku];
        if expired {
            p.not_before = rcgen::date_time_ymd(2020, 1, 1);
            p.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        p.signed_by(&key, &ca.issuer).unwrap().der().clone()
    }

    const MAPPING: &str = r#"
[[identity]]
match = { common_name = "runner" }
user = "bob"

[[identity]]
match = { uri = "spiffe://example.org/agent/alice" }
user = "bob"
"#;

    fn verifier(ca: &Ca) -> (Mapping, Arc<Mutex<Outcome>>) {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        roots.add(ca.der.clone()).unwrap();
        let inner = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider).build().unwrap();
        let rules = Rules { daemon_uid: 500, admin_gid: None };
        let ids = identities::parse(Path::new("ids.toml"), MAPPING, rules, &Bob).unwrap();
        let outcome = Arc::new(Mutex::new(Outcome::NotAsked));
        (Mapping { inner, identities: Arc::new(ids), constrained_anchor: false, outcome: outcome.clone() }, outcome)
    }

    fn verify(m: &Mapping, cert: &CertificateDer<'_>) -> Result<ClientCertVerified, rustls::Error> {
        m.verify_client_cert(cert, &[], UnixTime::now())
    }

    fn refused(outcome: &Mutex<Outcome>) -> (Option<String>, Reason) {
        match std::mem::take(&mut *outcome.lock().unwrap()) {
            Outcome::Refused { subject, reason, .. } => (subject, reason),
            other => panic!("not refused: {other:?}"),
        }
    }

    /// Attack: a sub-CA constrained to `team.example` (a team's own issuer) issues a certificate
    /// whose common name, or URI, is a mapped identity. rustls checks the constraint against dns
    /// names only, so the chain verifies; the mapping must not accept it.
    #[test]
    fn a_name_constrained_ca_maps_only_dns_names() {
        use rcgen::{GeneralSubtree, NameConstraints};
        let root = new_ca("root");
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, "team sub-CA");
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.name_constraints = Some(NameConstraints {
            permitted_subtrees: vec![GeneralSubtree::DnsName("team.example".into())],
            excluded_subtrees: vec![],
        });
        let sub_der = p.signed_by(&key, &root.issuer).unwrap().der().clone();
        let sub = Ca { issuer: Issuer::new(p, key), der: sub_der.clone() };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        roots.add(root.der.clone()).unwrap();
        let inner = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider).build().unwrap();
        let rules = Rules { daemon_uid: 500, admin_gid: None };
        let mapping = format!("{MAPPING}\n[[identity]]\nmatch = {{ dns = \"ci.team.example\" }}\nuser = \"bob\"\n");
        let ids = identities::parse(Path::new("ids.toml"), &mapping, rules, &Bob).unwrap();
        let outcome = Arc::new(Mutex::new(Outcome::NotAsked));
        let m = Mapping { inner, identities: Arc::new(ids), constrained_anchor: false, outcome: outcome.clone() };
        let chain = [sub_der];
        let denied = rustls::Error::InvalidCertificate(CertificateError::ApplicationVerificationFailure);
        let in_team = SanType::DnsName("x.team.example".try_into().unwrap());
        let by_cn = client(&sub, "runner", vec![in_team], false, ExtendedKeyUsagePurpose::ClientAuth);
        assert_eq!(m.verify_client_cert(&by_cn, &chain, UnixTime::now()).unwrap_err(), denied);
        match std::mem::take(&mut *outcome.lock().unwrap()) {
            Outcome::Refused { reason: Reason::Unmapped, detail, .. } => {
                assert!(detail.starts_with("it matched common_name=runner, but a CA of its chain is name-constrained"));
            }
            other => panic!("{other:?}"),
        }
        let uri = SanType::URI("spiffe://example.org/agent/alice".try_into().unwrap());
        let by_uri = client(&sub, "x", vec![uri], false, ExtendedKeyUsagePurpose::ClientAuth);
        assert_eq!(m.verify_client_cert(&by_uri, &chain, UnixTime::now()).unwrap_err(), denied);
        assert_eq!(refused(&outcome).1, Reason::Unmapped);
        // A dns name the constraint covers maps; one outside it fails the chain itself.
        let ci = SanType::DnsName("ci.team.example".try_into().unwrap());
        let by_dns = client(&sub, "x", vec![ci], false, ExtendedKeyUsagePurpose::ClientAuth);
        m.verify_client_cert(&by_dns, &chain, UnixTime::now()).unwrap();
        let outside = SanType::DnsName("ci.other.example".try_into().unwrap());
        let escaped = client(&sub, "x", vec![outside], false, ExtendedKeyUsagePurpose::ClientAuth);
        assert!(m.verify_client_cert(&escaped, &chain, UnixTime::now()).is_err());
        assert_eq!(refused(&outcome).1, Reason::BadCertificate);
        // The root's own certificates still map by common name.
        let plain = client(&root, "runner", vec![], false, ExtendedKeyUsagePurpose::ClientAuth);
        m.verify_client_cert(&plain, &[], UnixTime::now()).unwrap();
        // A constrained trust anchor counts as well.
        assert!(constrained(&chain[0]) && !constrained(&root.der));
    }

    #[test]
    fn handshakes_count_per_ipv4_address_and_per_ipv6_64() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(source(ip("192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(source(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(source(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd")), ip("2001:db8:1:2::"));
        assert_ne!(source(ip("2001:db8:1:3::1")), source(ip("2001:db8:1:2::1")));
    }

    #[test]
    fn a_mapped_certificate_passes_and_names_its_identity() {
        let ca = new_ca("ca");
        let (m, outcome) = verifier(&ca);
        verify(&m, &client(&ca, "runner", vec![], false, ExtendedKeyUsagePurpose::ClientAuth)).unwrap();
        match std::mem::take(&mut *outcome.lock().unwrap()) {
            Outcome::Mapped(id) => assert_eq!((&*id.label, id.uid), ("common_name=runner", 1001)),
            other => panic!("{other:?}"),
        }
        let uri = SanType::URI("spiffe://example.org/agent/alice".try_into().unwrap());
        verify(&m, &client(&ca, "someone", vec![uri], false, ExtendedKeyUsagePurpose::ClientAuth)).unwrap();
        assert!(matches!(&*outcome.lock().unwrap(), Outcome::Mapped(id) if id.label.starts_with("uri=spiffe")));
    }

    #[test]
    fn unmapped_ambiguous_expired_foreign_and_server_certificates_fail_the_handshake() {
        let ca = new_ca("ca");
        let (m, outcome) = verifier(&ca);
        let denied = rustls::Error::InvalidCertificate(CertificateError::ApplicationVerificationFailure);
        let stranger = client(&ca, "stranger", vec![], false, ExtendedKeyUsagePurpose::ClientAuth);
        assert_eq!(verify(&m, &stranger).unwrap_err(), denied);
        assert_eq!(refused(&outcome), (Some("CN=stranger".into()), Reason::Unmapped));
        // Its common name one identity, its URI another.
        let uri = SanType::URI("spiffe://example.org/agent/alice".try_into().unwrap());
        let both = client(&ca, "runner", vec![uri], false, ExtendedKeyUsagePurpose::ClientAuth);
        assert_eq!(verify(&m, &both).unwrap_err(), denied);
        assert_eq!(refused(&outcome), (Some("CN=runner".into()), Reason::Unmapped));
        let expired = client(&ca, "runner", vec![], true, ExtendedKeyUsagePurpose::ClientAuth);
        assert!(matches!(
            verify(&m, &expired).unwrap_err(),
            rustls::Error::InvalidCertificate(CertificateError::ExpiredContext { .. } | CertificateError::Expired)
        ));
        assert_eq!(refused(&outcome), (Some("CN=runner".into()), Reason::Expired));
        let other = new_ca("another ca");
        let foreign = client(&other, "runner", vec![], false, ExtendedKeyUsagePurpose::ClientAuth);
        assert_eq!(
            verify(&m, &foreign).unwrap_err(),
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)
        );
        assert_eq!(refused(&outcome), (Some("CN=runner".into()), Reason::UnknownIssuer));
        // A certificate for servers only is no client certificate.
        let server = client(&ca, "runner", vec![], false, ExtendedKeyUsagePurpose::ServerAuth);
        assert!(verify(&m, &server).is_err());
        assert_eq!(refused(&outcome), (Some("CN=runner".into()), Reason::BadCertificate));
        // Garbage.
        assert!(verify(&m, &CertificateDer::from(vec![0x30, 0x03, 0x02, 0x01, 0x01])).is_err());
        assert_eq!(refused(&outcome).1, Reason::BadCertificate);
        // And the verifier never lets a client skip its certificate.
        assert!(m.offer_client_auth() && m.client_auth_mandatory());
    }
}
