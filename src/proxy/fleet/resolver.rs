//! Looking up a host name's addresses for DNS discovery: [`lookup`] asks a
//! given DNS server (any `host:port`) for `A` and `AAAA` records and keeps
//! their TTL; [`system_lookup`] asks the system resolver when no server is
//! configured (no TTL, port 53 of `/etc/resolv.conf` only).
//!
//! [`lookup`] sends both queries at once from one UDP socket, with random
//! ids, sends each unanswered one again at half the timeout, and asks again
//! over TCP when an answer comes back truncated. The whole call ends by the
//! timeout. How answers become a result:
//! - addresses of both types are merged, sorted and deduplicated; the TTL is
//!   the least of the records used;
//! - NXDOMAIN or no records for both types is `Ok` with no addresses (the
//!   name exists with no members now), with the negative TTL if the server
//!   gave one;
//! - SERVFAIL, REFUSED (any other RCODE), a timeout or a malformed answer is
//!   an error, so the caller keeps the members it has; but when one type
//!   fails while the other gives addresses, those addresses are the result.
//!
//! Deliberately not here: caching, choosing when to ask again (the caller
//! does, from the TTL), search domains, `/etc/hosts`, EDNS, or spreading
//! queries over several servers. The wire format is [`crate::dns`]'s.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::{sleep_until, timeout_at, Instant};

use crate::dns::{self, Answer, DnsError, Rcode, RecordKind};

#[cfg(test)]
mod tests;

/// The two record types asked, in the order results are combined.
const KINDS: [RecordKind; 2] = [RecordKind::A, RecordKind::Aaaa];

/// Receive buffer for a UDP answer: the largest datagram.
const MAX_DATAGRAM: usize = 65_535;

/// The addresses a name has now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lookup {
    /// Every address, IPv4 and IPv6, sorted, without duplicates; empty when
    /// the name does not exist or has no address records.
    pub addresses: Vec<IpAddr>,
    /// How long the answer holds: the least TTL of the records used or,
    /// when there are no addresses, the negative TTL from the server's SOA.
    /// `None` when the server gave no negative TTL.
    pub ttl: Option<Duration>,
}

/// Why a lookup gave no usable answer; the caller keeps what it had.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// The host name cannot be asked (invalid, or an IP literal).
    #[error("{0}")]
    Name(DnsError),
    /// A socket failed (including ICMP "port unreachable" from the server).
    #[error("DNS socket error: {0}")]
    Io(#[from] io::Error),
    /// No answer within the timeout.
    #[error("no DNS answer within {0:?}")]
    Timeout(Duration),
    /// The server answered with an error code.
    #[error("DNS server answered {rcode} for {kind}")]
    Server {
        /// The record type asked.
        kind: RecordKind,
        /// The code it answered.
        rcode: Rcode,
    },
    /// The answer could not be read.
    #[error("bad DNS answer for {kind}: {source}")]
    Malformed {
        /// The record type asked.
        kind: RecordKind,
        /// What is wrong with the answer.
        source: DnsError,
    },
    /// The answer over TCP still had the TC bit set.
    #[error("DNS answer for {0} truncated even over TCP")]
    Truncated(RecordKind),
}

/// One record type's result: the answer read, before judging its RCODE.
type Outcome = Result<Answer, LookupError>;

/// Asks `server` for `name`'s `A` and `AAAA` records and combines them (see
/// the module documentation), all within `timeout`.
pub async fn lookup(
    server: SocketAddr,
    name: &str,
    timeout: Duration,
) -> Result<Lookup, LookupError> {
    let deadline = Instant::now() + timeout;
    let first: u16 = rand::random();
    // Two different ids, so an answer tells which query it is for.
    let ids = [
        first,
        first.wrapping_add(1 + rand::random::<u16>() % 0xfffe),
    ];
    let queries = [
        dns::query(ids[0], name, KINDS[0]).map_err(LookupError::Name)?,
        dns::query(ids[1], name, KINDS[1]).map_err(LookupError::Name)?,
    ];
    let [a, aaaa] = over_udp(server, name, ids, &queries, deadline, timeout).await?;
    let (a, aaaa) = tokio::join!(
        again_over_tcp_if_truncated(a, server, name, KINDS[0], deadline, timeout),
        again_over_tcp_if_truncated(aaaa, server, name, KINDS[1], deadline, timeout),
    );
    combine(judge(KINDS[0], a), judge(KINDS[1], aaaa))
}

/// Resolves `host` with the system resolver (`getaddrinfo`, blocking): every
/// address, sorted, without duplicates. An IP literal is returned as is.
pub fn system_lookup(host: &str, port: u16) -> Result<Vec<IpAddr>, String> {
    let mut addresses: Vec<IpAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .map(|a| a.ip())
        .collect();
    addresses.sort();
    addresses.dedup();
    Ok(addresses)
}

// === UDP and TCP ===

/// Sends both queries and waits for both answers until `deadline`, sending
/// the unanswered ones once more at half the timeout. A record type with no
/// answer by then is [`LookupError::Timeout`]; a socket error fails both.
async fn over_udp(
    server: SocketAddr,
    name: &str,
    ids: [u16; 2],
    queries: &[Vec<u8>; 2],
    deadline: Instant,
    timeout: Duration,
) -> Result<[Outcome; 2], LookupError> {
    let local: SocketAddr = if server.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(local).await?;
    // Connected: datagrams from anywhere but the server are dropped.
    socket.connect(server).await?;
    for q in queries {
        socket.send(q).await?;
    }
    let resend_at = Instant::now() + timeout / 2;
    let mut resent = false;
    let mut outcomes: [Option<Outcome>; 2] = [None, None];
    let mut buf = vec![0u8; MAX_DATAGRAM];
    while outcomes.iter().any(Option::is_none) {
        tokio::select! {
            got = socket.recv(&mut buf) => {
                let msg = buf.get(..got?).unwrap_or_default();
                let Some(&[hi, lo]) = msg.get(..2) else { continue };
                let id = u16::from_be_bytes([hi, lo]);
                for (i, kind) in KINDS.into_iter().enumerate() {
                    if ids[i] == id && outcomes[i].is_none() {
                        outcomes[i] = Some(
                            dns::parse(msg, id, name, kind)
                                .map_err(|source| LookupError::Malformed { kind, source }),
                        );
                    }
                }
            }
            () = sleep_until(resend_at), if !resent => {
                resent = true;
                for (q, outcome) in queries.iter().zip(&outcomes) {
                    if outcome.is_none() {
                        socket.send(q).await?;
                    }
                }
            }
            () = sleep_until(deadline) => break,
        }
    }
    Ok(outcomes.map(|o| o.unwrap_or(Err(LookupError::Timeout(timeout)))))
}

/// `outcome` as it is, or, when its answer was truncated, the answer to the
/// same question asked over TCP (length-prefixed, RFC 1035 §4.2.2).
async fn again_over_tcp_if_truncated(
    outcome: Outcome,
    server: SocketAddr,
    name: &str,
    kind: RecordKind,
    deadline: Instant,
    timeout: Duration,
) -> Outcome {
    match outcome {
        Ok(answer) if answer.truncated => {}
        other => return other,
    }
    let id: u16 = rand::random();
    let query = dns::query(id, name, kind).map_err(LookupError::Name)?;
    let exchange = async {
        let mut stream = TcpStream::connect(server).await?;
        let mut framed = Vec::with_capacity(2 + query.len());
        framed.extend_from_slice(&(query.len() as u16).to_be_bytes());
        framed.extend_from_slice(&query);
        stream.write_all(&framed).await?;
        let len = stream.read_u16().await?;
        let mut msg = vec![0u8; usize::from(len)];
        stream.read_exact(&mut msg).await?;
        Ok::<_, io::Error>(msg)
    };
    let msg = match timeout_at(deadline, exchange).await {
        Ok(got) => got?,
        Err(_) => return Err(LookupError::Timeout(timeout)),
    };
    let answer = dns::parse(&msg, id, name, kind)
        .map_err(|source| LookupError::Malformed { kind, source })?;
    if answer.truncated {
        return Err(LookupError::Truncated(kind));
    }
    Ok(answer)
}

// === combining ===

/// One record type's usable result: NOERROR and NXDOMAIN are answers, any
/// other RCODE an error.
fn judge(kind: RecordKind, outcome: Outcome) -> Outcome {
    let answer = outcome?;
    match answer.rcode {
        Rcode::NoError | Rcode::NxDomain => Ok(answer),
        rcode => Err(LookupError::Server { kind, rcode }),
    }
}

/// Both record types' results as one lookup; see the module documentation.
fn combine(a: Outcome, aaaa: Outcome) -> Result<Lookup, LookupError> {
    let answers = match (a, aaaa) {
        (Ok(a), Ok(aaaa)) => vec![a, aaaa],
        (Ok(one), Err(e)) | (Err(e), Ok(one)) => {
            if one.addresses.is_empty() {
                return Err(e);
            }
            vec![one]
        }
        (Err(e), Err(_)) => return Err(e),
    };
    let records = || answers.iter().flat_map(|a| a.addresses.iter());
    let mut addresses: Vec<IpAddr> = records().map(|(ip, _)| *ip).collect();
    addresses.sort();
    addresses.dedup();
    let ttl = if addresses.is_empty() {
        answers.iter().filter_map(|a| a.negative_ttl).min()
    } else {
        records().map(|(_, ttl)| *ttl).min()
    };
    Ok(Lookup {
        addresses,
        ttl: ttl.map(|s| Duration::from_secs(u64::from(s))),
    })
}
