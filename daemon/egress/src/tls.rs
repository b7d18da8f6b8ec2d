//! The per-daemon certificate authority that terminates TLS for the hosts a secret is bound to
//! (or that have request rules): generated in memory when cordond starts, its key never
//! written anywhere, its certificate offered to tools inside their views only (the trust
//! bundle cordond writes: the system's roots plus this one). Also the other side of a
//! terminated connection: the upstream is verified against the system's roots (loaded once) or
//! the host's root-owned `upstream_ca`; nothing here can turn verification off.
//!
//! Leaf certificates are minted on demand for one terminated host at a time (its name as a
//! `dNSName`, or its address as an IP SAN), ECDSA P-256, valid for [`LEAF_VALIDITY`], and kept
//! in a bounded cache ([`LEAF_CACHE`] hosts, each reused for at most [`LEAF_REUSE`]).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use cordon_core::egress::Target;

/// Hosts whose leaf certificate is kept (the oldest goes first when full).
pub(crate) const LEAF_CACHE: usize = 256;
/// How long a minted leaf is valid (from an hour before it was made, for clocks a little off).
pub(crate) const LEAF_VALIDITY: Duration = Duration::from_secs(24 * 3600);
/// How long a cached leaf is handed out before a new one is minted (well within its validity).
pub(crate) const LEAF_REUSE: Duration = Duration::from_secs(12 * 3600);
/// The one application protocol of terminated connections, both sides.
const HTTP11: &[u8] = b"http/1.1";

/// Why the authority could not be made (or could not mint a leaf).
#[derive(Debug, thiserror::Error)]
#[error("cannot make the egress proxy's certificate authority: {0}")]
pub struct AuthorityError(String);

/// cordond's CA for terminated connections. Cheap to share (`Arc`).
pub struct Authority {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    cert_der: Vec<u8>,
    /// The server side of terminated connections, per host (its leaf and key inside).
    leaves: Mutex<HashMap<String, (Instant, Arc<ServerConfig>)>>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Authority").field("cert_der_len", &self.cert_der.len()).finish_non_exhaustive()
    }
}

/// The crypto of both sides (ring, as the rest of cordond's TLS).
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    static PROVIDER: LazyLock<Arc<rustls::crypto::CryptoProvider>> =
        LazyLock::new(|| Arc::new(rustls::crypto::ring::default_provider()));
    PROVIDER.clone()
}

impl Authority {
    /// A fresh CA (ECDSA P-256), valid from a day ago for 397 days, named after this daemon.
    pub fn generate(daemon: &str) -> Result<Arc<Authority>, AuthorityError> {
        let key = KeyPair::generate().map_err(|e| AuthorityError(e.to_string()))?;
        let mut p = CertificateParams::new(Vec::<String>::new()).map_err(|e| AuthorityError(e.to_string()))?;
        p.distinguished_name.push(DnType::CommonName, format!("cordon egress proxy CA ({daemon})"));
        p.distinguished_name.push(DnType::OrganizationName, "cordon");
        p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let now = time::OffsetDateTime::now_utc();
        p.not_before = now - time::Duration::days(1);
        p.not_after = now + time::Duration::days(397);
        let cert = p.self_signed(&key).map_err(|e| AuthorityError(e.to_string()))?;
        let cert_pem = cert.pem();
        let cert_der = cert.der().to_vec();
        Ok(Arc::new(Authority { issuer: Issuer::new(p, key), cert_pem, cert_der, leaves: Mutex::default() }))
    }

    /// The CA certificate, PEM (what the trust bundle adds to the system's roots).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate, DER.
    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }

    /// The server side of a terminated connection to `host`: a leaf for exactly that name (or
    /// address), ALPN `http/1.1` only. Called only for terminated hosts (see `terminate`).
    pub(crate) fn server_config(&self, host: &Target) -> Result<Arc<ServerConfig>, AuthorityError> {
        let key = host.to_string();
        {
            let leaves = self.leaves.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((made, config)) = leaves.get(&key)
                && made.elapsed() < LEAF_REUSE
            {
                return Ok(config.clone());
            }
        }
        let config = self.mint(&key)?;
        let mut leaves = self.leaves.lock().unwrap_or_else(|p| p.into_inner());
        if leaves.len() >= LEAF_CACHE && !leaves.contains_key(&key) {
            leaves.retain(|_, (made, _)| made.elapsed() < LEAF_REUSE);
            if leaves.len() >= LEAF_CACHE
                && let Some(oldest) = leaves.iter().min_by_key(|(_, (made, _))| *made).map(|(k, _)| k.clone())
            {
                leaves.remove(&oldest);
            }
        }
        leaves.insert(key, (Instant::now(), config.clone()));
        Ok(config)
    }

    /// Hosts with a leaf in the cache (tests).
    #[cfg(test)]
    pub(crate) fn cached(&self) -> Vec<String> {
        let mut v: Vec<String> = self.leaves.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
        v.sort();
        v
    }

    fn mint(&self, host: &str) -> Result<Arc<ServerConfig>, AuthorityError> {
        let err = |e: &dyn std::fmt::Display| AuthorityError(format!("a certificate for {host}: {e}"));
        let key = KeyPair::generate().map_err(|e| err(&e))?;
        // An address becomes an IP SAN, a name a dNSName (rcgen tells them apart).
        let mut p = CertificateParams::new(vec![host.to_string()]).map_err(|e| err(&e))?;
        p.distinguished_name.push(DnType::CommonName, host);
        p.is_ca = IsCa::ExplicitNoCa;
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let now = time::OffsetDateTime::now_utc();
        p.not_before = now - time::Duration::hours(1);
        p.not_after = now + time::Duration::seconds(LEAF_VALIDITY.as_secs() as i64);
        let cert = p.signed_by(&key, &self.issuer).map_err(|e| err(&e))?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| err(&e))?
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], der)
            .map_err(|e| err(&e))?;
        config.alpn_protocols = vec![HTTP11.to_vec()];
        Ok(Arc::new(config))
    }

    /// The issuer leaf certificates are signed by (crate-internal: only the proxy mints).
    #[allow(dead_code)]
    pub(crate) fn issuer(&self) -> &Issuer<'static, KeyPair> {
        &self.issuer
    }
}

/// The client side of a terminated connection, verifying against `roots`; ALPN `http/1.1`.
fn client_config(roots: RootCertStore) -> Result<Arc<ClientConfig>, String> {
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![HTTP11.to_vec()];
    Ok(Arc::new(config))
}

/// Verification against the system's roots (`rustls-native-certs`), loaded once.
pub(crate) fn system_roots() -> Result<Arc<ClientConfig>, String> {
    static SYSTEM: LazyLock<Result<Arc<ClientConfig>, String>> = LazyLock::new(|| {
        let loaded = rustls_native_certs::load_native_certs();
        let mut roots = RootCertStore::empty();
        let (added, _unparsable) = roots.add_parsable_certificates(loaded.certs);
        if added == 0 {
            let errors: Vec<String> = loaded.errors.iter().map(|e| e.to_string()).collect();
            return Err(format!("no trusted root certificates found on this host ({})", errors.join("; ")));
        }
        client_config(roots)
    });
    SYSTEM.clone()
}

/// Verification against a host's `upstream_ca`: a PEM file that only root can change (it and
/// every directory above it root's, writable by no one else, no symlink: core's
/// `read_upstream_ca`, the check `policy check` makes too), read each time it is used.
pub(crate) fn upstream_ca(path: &Path) -> Result<Arc<ClientConfig>, String> {
    let pem = cordon_core::policy::rootfile::read_upstream_ca(path)?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| format!("upstream_ca {}: {e}", path.display()))?;
        roots.add(cert).map_err(|e| format!("upstream_ca {}: {e}", path.display()))?;
    }
    if roots.is_empty() {
        return Err(format!("upstream_ca {} holds no PEM certificate", path.display()));
    }
    client_config(roots)
}
