//! The server name (SNI) of a TLS ClientHello: a tunnel opened for one name must not carry a TLS
//! session for another (the same address may serve both: a CDN, a shared host). Only the first
//! record is read, and it must hold the whole ClientHello, alone. A hello whose name cannot be
//! checked is no hello for the name: one without `server_name`, with an encrypted one (ECH,
//! `encrypted_client_hello`, 0xfe0d; its draft ESNI, 0xffce), with two `server_name`
//! extensions (or any extension twice) or several names in one, an SSLv2-form hello (it has no
//! extensions at all), a record or hello version that is not TLS's: the caller refuses each,
//! saying why.

use cordon_core::egress::ECH_OFF;

/// The TLS record type of a handshake, the first byte of a ClientHello.
pub(crate) const HANDSHAKE: u8 = 0x16;
/// Longest first flight read for the check: one TLS record.
pub(crate) const MAX_RECORD: usize = 5 + (1 << 14) + 256;
/// `encrypted_client_hello` (RFC 9849, the ECH draft's code point).
const ECH: u16 = 0xfe0d;
/// `encrypted_server_name` (the ESNI draft).
const ESNI: u16 = 0xffce;

/// Whether `buf` holds a whole first record (or cannot be TLS, or is too long to wait for).
pub(crate) fn complete(buf: &[u8]) -> bool {
    if buf.first() != Some(&HANDSHAKE) || buf.len() >= MAX_RECORD {
        return true;
    }
    buf.len() >= 5 && buf.len() >= 5 + usize::from(u16::from_be_bytes([buf[3], buf[4]]))
}

/// What the first record of a tunnel says about the TLS server name it is for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Hello {
    /// No TLS handshake record (another protocol, or nothing): not judged here.
    NotTls,
    /// A whole, checkable ClientHello in the first record, and the name it asks for (lowercase,
    /// without a trailing dot), `None` when it names none.
    Name(Option<String>),
    /// A handshake record without a whole ClientHello in it (cut short, fragmented over several
    /// records, or malformed): its name cannot be read before it goes up, so it does not go.
    Unreadable,
    /// An SSLv2-form ClientHello (first byte with the high bit set, message type 1): it cannot
    /// carry a server name.
    Sslv2,
    /// A whole ClientHello whose name cannot be checked, and why (ECH, ESNI, duplicated
    /// extensions, several names, a name that is no host name, versions that are not TLS).
    Unverifiable(String),
}

/// Reads the first record of `buf` (see [`complete`]).
pub(crate) fn hello(buf: &[u8]) -> Hello {
    if buf.len() >= 3 && buf[0] & 0x80 != 0 && buf[2] == 1 {
        return Hello::Sslv2;
    }
    if buf.first() != Some(&HANDSHAKE) {
        return Hello::NotTls;
    }
    match parse(buf) {
        Ok(name) => Hello::Name(name),
        Err(None) => Hello::Unreadable,
        Err(Some(why)) => Hello::Unverifiable(why),
    }
}

/// The host name a ClientHello record asks for; `Err(None)` when the record holds no whole,
/// well-formed ClientHello (a handshake message fragmented over records is one that does not),
/// `Err(Some(why))` when it holds one whose name cannot be checked.
fn parse(record: &[u8]) -> Result<Option<String>, Option<String>> {
    let mut r = Reader(record);
    if r.u8().ok_or(None)? != HANDSHAKE {
        return Err(None);
    }
    let version = r.u16().ok_or(None)?;
    if !(0x0300..=0x0304).contains(&version) {
        return Err(Some(format!("its first TLS record has version {version:#06x}, which is no TLS version")));
    }
    let len = r.u16().ok_or(None)?;
    let mut r = Reader(r.take(usize::from(len)).ok_or(None)?);
    if r.u8().ok_or(None)? != 1 {
        return Err(None); // not a ClientHello
    }
    let n = r.take(3).ok_or(None)?;
    let n = usize::from(n[0]) << 16 | usize::from(n[1]) << 8 | usize::from(n[2]);
    // The whole message in this record, or no judgement can be made.
    let mut m = Reader(r.take(n).ok_or(None)?);
    if !r.0.is_empty() {
        return Err(Some("its first TLS record holds more than the ClientHello".into()));
    }
    let version = m.u16().ok_or(None)?;
    if !(0x0300..=0x0303).contains(&version) {
        return Err(Some(format!("its ClientHello has version {version:#06x}, which is no TLS version")));
    }
    m.take(32).ok_or(None)?; // random
    let n = m.u8().ok_or(None)?;
    m.take(usize::from(n)).ok_or(None)?; // session id
    let n = m.u16().ok_or(None)?;
    m.take(usize::from(n)).ok_or(None)?; // cipher suites
    let n = m.u8().ok_or(None)?;
    m.take(usize::from(n)).ok_or(None)?; // compression methods
    if m.0.is_empty() {
        return Ok(None); // no extensions at all
    }
    let n = m.u16().ok_or(None)?;
    let mut ext = Reader(m.take(usize::from(n)).ok_or(None)?);
    if !m.0.is_empty() {
        return Err(None); // bytes after the extensions
    }
    let mut seen: Vec<u16> = Vec::new();
    let mut name = None;
    while !ext.0.is_empty() {
        let kind = ext.u16().ok_or(None)?;
        let n = ext.u16().ok_or(None)?;
        let data = ext.take(usize::from(n)).ok_or(None)?;
        if seen.contains(&kind) {
            return Err(Some(format!("its ClientHello carries extension {kind:#06x} twice")));
        }
        seen.push(kind);
        match kind {
            ECH => {
                return Err(Some(format!(
                    "its ClientHello carries an encrypted ClientHello (ECH), whose real server name cannot be \
                     read; {ECH_OFF}"
                )));
            }
            ESNI => return Err(Some("its ClientHello carries an encrypted server name (ESNI)".into())),
            0 => name = Some(server_name(data)?),
            _ => {}
        }
    }
    Ok(name)
}

/// The one host name of a `server_name` extension's data.
fn server_name(data: &[u8]) -> Result<String, Option<String>> {
    let mut outer = Reader(data);
    let n = outer.u16().ok_or(None)?;
    let mut list = Reader(outer.take(usize::from(n)).ok_or(None)?);
    if !outer.0.is_empty() {
        return Err(None);
    }
    let mut names = Vec::new();
    while !list.0.is_empty() {
        let name_type = list.u8().ok_or(None)?;
        let n = list.u16().ok_or(None)?;
        let name = list.take(usize::from(n)).ok_or(None)?;
        if name_type != 0 {
            return Err(Some(format!("its server_name carries a name of type {name_type}, not a host name")));
        }
        names.push(name);
    }
    let [name] = names.as_slice() else {
        return Err(Some(format!("its server_name carries {} names, not one", names.len())));
    };
    let shown = String::from_utf8_lossy(name);
    match std::str::from_utf8(name).ok().and_then(cordon_core::egress::Target::parse) {
        Some(cordon_core::egress::Target::Name(n)) => Ok(n),
        _ => Err(Some(format!("its server_name {:?} is no host name", crate::request::clip(&shown)))),
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
}

/// A `server_name` extension's data naming each of `names` (tests).
#[cfg(test)]
pub(crate) fn server_names(names: &[&str]) -> Vec<u8> {
    let mut list = Vec::new();
    for name in names {
        list.push(0);
        list.extend_from_slice(&(name.len() as u16).to_be_bytes());
        list.extend_from_slice(name.as_bytes());
    }
    let mut data = (list.len() as u16).to_be_bytes().to_vec();
    data.extend_from_slice(&list);
    data
}

/// A ClientHello record with these extensions, in this order (tests).
#[cfg(test)]
pub(crate) fn client_hello_with(extensions: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut ext = Vec::new();
    for (kind, data) in extensions {
        ext.extend_from_slice(&kind.to_be_bytes());
        ext.extend_from_slice(&(data.len() as u16).to_be_bytes());
        ext.extend_from_slice(data);
    }
    let mut body = vec![0x03, 0x03];
    body.extend_from_slice(&[7u8; 32]);
    body.push(0); // session id
    body.extend_from_slice(&[0x00, 0x02, 0x13, 0x01]); // one cipher suite
    body.extend_from_slice(&[0x01, 0x00]); // null compression
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&ext);
    let mut hs = vec![1];
    hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend_from_slice(&body);
    let mut record = vec![HANDSHAKE, 0x03, 0x01];
    record.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    record.extend_from_slice(&hs);
    record
}

/// A minimal ClientHello record naming `sni`, after another extension to walk past (tests).
#[cfg(test)]
pub(crate) fn client_hello(sni: &str) -> Vec<u8> {
    client_hello_with(&[(0x000a, vec![0x00, 0x02, 0x00, 0x1d]), (0, server_names(&[sni]))])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_name_of_a_client_hello() {
        let h = client_hello("API.Example.com.");
        assert!(complete(&h));
        assert!(!complete(&h[..h.len() - 1]));
        assert_eq!(hello(&h), Hello::Name(Some("api.example.com".into())));
        assert_eq!(hello(&h[..40]), Hello::Unreadable, "cut short");
        assert_eq!(hello(b"GET / HTTP/1.1\r\n\r\n"), Hello::NotTls);
        assert_eq!(hello(b""), Hello::NotTls);
        assert!(complete(b"G"), "not TLS: nothing to wait for");
    }

    #[test]
    fn hellos_whose_name_cannot_be_checked_say_why() {
        let sni = (0u16, server_names(&["ok.test"]));
        let unverifiable = |h: Vec<u8>| match hello(&h) {
            Hello::Unverifiable(why) => why,
            other => panic!("{other:?}"),
        };
        assert_eq!(hello(&client_hello_with(&[])), Hello::Name(None), "no extensions");
        assert_eq!(hello(&client_hello_with(&[(0x000a, vec![0, 2, 0, 0x1d])])), Hello::Name(None), "no SNI");
        assert!(unverifiable(client_hello_with(&[sni.clone(), (ECH, vec![0; 8])])).contains("(ECH)"));
        assert!(unverifiable(client_hello_with(&[(ECH, vec![0; 8]), sni.clone()])).contains("EncryptedClientHello"));
        assert!(unverifiable(client_hello_with(&[sni.clone(), (ESNI, vec![0; 8])])).contains("ESNI"));
        let twice = client_hello_with(&[sni.clone(), (0, server_names(&["evil.test"]))]);
        assert!(unverifiable(twice).contains("extension 0x0000 twice"));
        let two = client_hello_with(&[(0, server_names(&["ok.test", "evil.test"]))]);
        assert!(unverifiable(two).contains("2 names, not one"));
        let none = client_hello_with(&[(0, server_names(&[]))]);
        assert!(unverifiable(none).contains("0 names"));
        for bad in ["ok.test\0", "1.2.3.4", "ok test", ""] {
            let h = client_hello_with(&[(0, server_names(&[bad]))]);
            assert!(unverifiable(h).contains("is no host name"), "{bad:?}");
        }
        let mut other_type = server_names(&["ok.test"]);
        other_type[2] = 1;
        assert!(unverifiable(client_hello_with(&[(0, other_type)])).contains("type 1"));
        assert_eq!(hello(&client_hello("OK.Test.")), Hello::Name(Some("ok.test".into())), "DNS case, one dot");
        let mut v = client_hello("ok.test");
        v[1] = 2;
        assert!(unverifiable(v).contains("record has version 0x0201"));
        let mut v = client_hello("ok.test");
        v[9] = 0x7f;
        assert!(unverifiable(v).contains("ClientHello has version 0x7f03"));
        // A second handshake message after the ClientHello, in the same record.
        let mut extra = client_hello("ok.test");
        extra.extend_from_slice(&[1, 0, 0, 0]);
        let len = (extra.len() - 5) as u16;
        extra[3..5].copy_from_slice(&len.to_be_bytes());
        assert!(unverifiable(extra).contains("more than the ClientHello"));
        // SSLv2's record: 2-byte length with the high bit set, message type 1 (CLIENT-HELLO).
        assert_eq!(hello(&[0x80, 0x2e, 0x01, 0x00, 0x02]), Hello::Sslv2);
    }
}
