//! The per-daemon certificate authority that terminates TLS for the hosts a secret is bound to
//! (or that have request rules): generated in memory when cordond starts, its key never
//! written anywhere, its certificate offered to tools inside their views only (the trust
//! bundle cordond writes: the system's roots plus this one).

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

/// Why the authority could not be made.
#[derive(Debug, thiserror::Error)]
#[error("cannot make the egress proxy's certificate authority: {0}")]
pub struct AuthorityError(String);

/// cordond's CA for terminated connections. Cheap to share (`Arc`).
pub struct Authority {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    cert_der: Vec<u8>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Authority").field("cert_der_len", &self.cert_der.len()).finish_non_exhaustive()
    }
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
        Ok(Arc::new(Authority { issuer: Issuer::new(p, key), cert_pem, cert_der }))
    }

    /// The CA certificate, PEM (what the trust bundle adds to the system's roots).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate, DER.
    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }

    /// The issuer leaf certificates are signed by (crate-internal: only the proxy mints).
    #[allow(dead_code)]
    pub(crate) fn issuer(&self) -> &Issuer<'static, KeyPair> {
        &self.issuer
    }
}
