//! The step from a decision to an upstream connection. The rules' decision is a [`Grant`]: the
//! addresses to connect to, which nothing can read. [`Grant::record`] hands the attempt's record
//! to the [`EgressLog`] and waits until it is durable; only then does it give back a
//! [`Recorded`], and [`Recorded::connect`] is the proxy's one upstream connect. So the compiler
//! keeps "the record is durable before the connect": there is no other way from a grant to a
//! socket, and a log error leaves no [`Recorded`] to connect with (the caller refuses: fail
//! closed).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::net::TcpStream;

use crate::log::{EgressLog, EgressRecord, LogError};
use crate::reply::{self, socks_code};
use crate::request::Protocol;
use cordon_core::egress::{Refusal, THIS_HOST};

/// What the rules granted one attempt: the rule, and the addresses to connect to (checked,
/// never resolved again). Not connectable until recorded.
#[derive(Debug)]
pub(crate) struct Grant {
    rule: String,
    addrs: Vec<IpAddr>,
}

impl Grant {
    pub(crate) fn new(rule: String, addrs: Vec<IpAddr>) -> Grant {
        Grant { rule, addrs }
    }

    /// Adds `allowed`, `rule` and `addresses` to the attempt's `record`, makes it durable
    /// through `log`, and gives the addresses back only once it is.
    pub(crate) async fn record(self, log: &dyn EgressLog, record: EgressRecord) -> Result<Recorded, LogError> {
        let addresses: Vec<String> = self.addrs.iter().map(|a| a.to_string()).collect();
        let record = record.with("allowed", true).with("rule", self.rule).with("addresses", addresses);
        log.durable(record).await?;
        Ok(Recorded { addrs: self.addrs })
    }
}

/// A grant whose record is durable: the only way to an upstream connection.
#[derive(Debug)]
pub(crate) struct Recorded {
    addrs: Vec<IpAddr>,
}

impl Recorded {
    /// Connects to the first of the recorded addresses that answers (each checked already;
    /// never re-resolved), each one first passing `fresh` (this host's addresses, read again).
    /// The one upstream connect of the proxy.
    pub(crate) async fn connect(
        &self,
        port: u16,
        fresh: impl Fn(IpAddr) -> Result<(), String>,
    ) -> Result<TcpStream, Upstream> {
        let mut last = Upstream::Stopped;
        for &ip in &self.addrs {
            let addr = SocketAddr::new(ip, port);
            if let Err(why) = fresh(ip) {
                last = Upstream::OwnAddress { addr, why };
                continue;
            }
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
                Ok(Ok(s)) => {
                    let _ = s.set_nodelay(true);
                    return Ok(s);
                }
                Ok(Err(source)) => last = Upstream::Failed { addr, source },
                Err(_) => last = Upstream::TimedOut { addr },
            }
        }
        Err(last)
    }
}

/// Time for connecting to one upstream address.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why no upstream connection was made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Upstream {
    #[error("{addr}: {source}")]
    Failed { addr: SocketAddr, source: std::io::Error },
    #[error("{addr}: no connection within {} s", CONNECT_TIMEOUT.as_secs())]
    TimedOut { addr: SocketAddr },
    #[error("the invocation ended")]
    Stopped,
    #[error("{addr}: not connected: {why}")]
    OwnAddress { addr: SocketAddr, why: String },
}

impl Upstream {
    pub(crate) fn end(&self) -> &'static str {
        match self {
            Upstream::Stopped => "stopped",
            Upstream::OwnAddress { .. } => "refused",
            _ => "connect_failed",
        }
    }

    pub(crate) async fn answer(&self, protocol: Protocol, client: &mut TcpStream) {
        let refused =
            matches!(self, Upstream::Failed { source, .. } if source.kind() == std::io::ErrorKind::ConnectionRefused);
        if let Upstream::OwnAddress { .. } = self {
            return match protocol {
                Protocol::Socks5 => reply::socks(client, socks_code::NOT_ALLOWED).await,
                Protocol::Connect | Protocol::Http => {
                    let body = format!("cordon: the egress proxy refused the connection: {self}\n");
                    reply::refused(client, 403, Refusal::Special { addr: self.ip(), class: THIS_HOST }.kind(), &body)
                        .await
                }
            };
        }
        match protocol {
            Protocol::Socks5 => {
                reply::socks(client, if refused { socks_code::REFUSED } else { socks_code::HOST_UNREACHABLE }).await
            }
            Protocol::Connect | Protocol::Http => {
                reply::refused(
                    client,
                    502,
                    "upstream",
                    &format!("cordon: the egress proxy could not connect: {self}\n"),
                )
                .await;
            }
        }
    }
}

impl Upstream {
    fn ip(&self) -> IpAddr {
        match self {
            Upstream::Failed { addr, .. } | Upstream::TimedOut { addr } | Upstream::OwnAddress { addr, .. } => {
                addr.ip()
            }
            Upstream::Stopped => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        }
    }
}
