//! SOCKS5 on the proxy's port (RFC 1928): no authentication, `CONNECT` to a name, an IPv4 or an
//! IPv6 address. Names are resolved by the proxy (`socks5h://`, what `ALL_PROXY` says), so the
//! tool never needs DNS. Its replies are [`crate::reply`]'s.

use std::net::{Ipv4Addr, Ipv6Addr};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::reply::socks_code::{ADDRESS_NOT_SUPPORTED, COMMAND_NOT_SUPPORTED, GENERAL_FAILURE, HOST_UNREACHABLE};
use crate::reply::{Bad, Reply, SOCKS_VERSION as VERSION};
use crate::request::{Protocol, Request};
/// "No authentication required", the only method offered.
const NO_AUTH: u8 = 0;
const NO_ACCEPTABLE_METHOD: u8 = 0xff;

fn bad(code: u8, message: impl Into<String>) -> Bad {
    Bad::socks(code, message)
}

/// Reads the greeting, picks "no authentication", and reads the request (from the client's
/// connection, or bytes in a test).
pub(crate) async fn read_request<S: AsyncRead + AsyncWrite + Unpin>(client: &mut S) -> Result<Request, Bad> {
    let eof = |e: std::io::Error| Bad::io(&e);
    let mut greeting = [0u8; 2];
    client.read_exact(&mut greeting).await.map_err(eof)?;
    let mut methods = vec![0u8; usize::from(greeting[1])];
    client.read_exact(&mut methods).await.map_err(eof)?;
    if !methods.contains(&NO_AUTH) {
        let _ = client.write_all(&[VERSION, NO_ACCEPTABLE_METHOD]).await;
        let _ = client.shutdown().await;
        return Err(Bad {
            reply: Reply::Answered,
            message: "SOCKS5 without the no-authentication method: cordon's egress proxy takes no credentials".into(),
        });
    }
    client.write_all(&[VERSION, NO_AUTH]).await.map_err(eof)?;
    let mut req = [0u8; 4];
    client.read_exact(&mut req).await.map_err(eof)?;
    let [version, command, _, kind] = req;
    if version != VERSION {
        return Err(bad(GENERAL_FAILURE, format!("SOCKS request of version {version}")));
    }
    if command != 1 {
        return Err(bad(COMMAND_NOT_SUPPORTED, format!("SOCKS5 command {command}: only CONNECT (1) is supported")));
    }
    let host = match kind {
        1 => {
            let mut a = [0u8; 4];
            client.read_exact(&mut a).await.map_err(eof)?;
            Ipv4Addr::from(a).to_string()
        }
        3 => {
            let mut len = [0u8; 1];
            client.read_exact(&mut len).await.map_err(eof)?;
            let mut name = vec![0u8; usize::from(len[0])];
            client.read_exact(&mut name).await.map_err(eof)?;
            String::from_utf8(name).map_err(|_| bad(HOST_UNREACHABLE, "a SOCKS5 host name that is not UTF-8"))?
        }
        4 => {
            let mut a = [0u8; 16];
            client.read_exact(&mut a).await.map_err(eof)?;
            Ipv6Addr::from(a).to_string()
        }
        other => return Err(bad(ADDRESS_NOT_SUPPORTED, format!("SOCKS5 address type {other}"))),
    };
    let mut port = [0u8; 2];
    client.read_exact(&mut port).await.map_err(eof)?;
    let port = u16::from_be_bytes(port);
    if port == 0 {
        return Err(bad(GENERAL_FAILURE, "SOCKS5 CONNECT to port 0"));
    }
    Ok(Request { protocol: Protocol::Socks5, host, port, forward: None, early: Vec::new() })
}
