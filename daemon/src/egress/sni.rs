//! The server name (SNI) of a TLS ClientHello: a tunnel opened for one name must not carry a TLS
//! session for another (the same address may serve both: a CDN, a shared host). Only the first
//! record is read, and it must hold the whole ClientHello; a client that sends no TLS, or a
//! ClientHello without SNI, is not judged here.

/// The TLS record type of a handshake, the first byte of a ClientHello.
pub(super) const HANDSHAKE: u8 = 0x16;
/// Longest first flight read for the check: one TLS record.
pub(super) const MAX_RECORD: usize = 5 + (1 << 14) + 256;

/// Whether `buf` holds a whole first record (or cannot be TLS, or is too long to wait for).
pub(super) fn complete(buf: &[u8]) -> bool {
    if buf.first() != Some(&HANDSHAKE) || buf.len() >= MAX_RECORD {
        return true;
    }
    buf.len() >= 5 && buf.len() >= 5 + usize::from(u16::from_be_bytes([buf[3], buf[4]]))
}

/// What the first record of a tunnel says about the TLS server name it is for.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Hello {
    /// No TLS handshake record (another protocol, or nothing): not judged here.
    NotTls,
    /// A whole ClientHello in the first record, and the name it asks for (lowercase, without a
    /// trailing dot), `None` when it names none.
    Name(Option<String>),
    /// A handshake record without a whole ClientHello in it (cut short, fragmented over several
    /// records, or malformed): its name cannot be read before it goes up, so it does not go.
    Unreadable,
}

/// Reads the first record of `buf` (see [`complete`]).
pub(super) fn hello(buf: &[u8]) -> Hello {
    if buf.first() != Some(&HANDSHAKE) {
        return Hello::NotTls;
    }
    match server_name(buf) {
        Some(name) => Hello::Name(name),
        None => Hello::Unreadable,
    }
}

/// The host name a ClientHello record asks for; `None` when the record holds no whole, well-formed
/// ClientHello (a handshake message fragmented over records is one that does not).
fn server_name(record: &[u8]) -> Option<Option<String>> {
    let mut r = Reader(record);
    if r.u8()? != HANDSHAKE {
        return None;
    }
    r.take(2)?; // record version
    let len = r.u16()?;
    let mut r = Reader(r.take(usize::from(len))?);
    if r.u8()? != 1 {
        return None; // not a ClientHello
    }
    let n = r.take(3)?;
    let n = usize::from(n[0]) << 16 | usize::from(n[1]) << 8 | usize::from(n[2]);
    // The whole message in this record, or no judgement can be made.
    let mut r = Reader(r.take(n)?);
    r.take(2 + 32)?; // client version, random
    let n = r.u8()?;
    r.take(usize::from(n))?; // session id
    let n = r.u16()?;
    r.take(usize::from(n))?; // cipher suites
    let n = r.u8()?;
    r.take(usize::from(n))?; // compression methods
    if r.0.is_empty() {
        return Some(None); // no extensions at all
    }
    let n = r.u16()?;
    let mut ext = Reader(r.take(usize::from(n))?);
    while !ext.0.is_empty() {
        let kind = ext.u16()?;
        let n = ext.u16()?;
        let data = ext.take(usize::from(n))?;
        if kind != 0 {
            continue;
        }
        let mut list = Reader(data);
        let n = list.u16()?;
        let mut list = Reader(list.take(usize::from(n))?);
        while let Some(name_type) = list.u8() {
            let n = list.u16()?;
            let name = list.take(usize::from(n))?;
            if name_type == 0 {
                let name = std::str::from_utf8(name).ok()?;
                return Some(Some(name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()));
            }
        }
        return Some(None);
    }
    Some(None)
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

/// A minimal ClientHello record naming `sni` (tests).
#[cfg(test)]
pub(super) fn client_hello(sni: &str) -> Vec<u8> {
    let name = sni.as_bytes();
    let mut ext = Vec::new();
    // An extension before SNI (supported_groups), to walk past.
    ext.extend_from_slice(&[0x00, 0x0a, 0x00, 0x04, 0x00, 0x02, 0x00, 0x1d]);
    let list_len = 3 + name.len();
    ext.extend_from_slice(&[0, 0]);
    ext.extend_from_slice(&((list_len + 2) as u16).to_be_bytes());
    ext.extend_from_slice(&(list_len as u16).to_be_bytes());
    ext.push(0);
    ext.extend_from_slice(&(name.len() as u16).to_be_bytes());
    ext.extend_from_slice(name);
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
}
