#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! [`lookup`] against a scripted DNS server on loopback (UDP and TCP on one
//! port), and [`system_lookup`] on names every machine has.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};
use tokio::task::JoinHandle;

use super::*;
use crate::dns::testkit::{a, aaaa, read_query, soa, Response};

const NAME: &str = "llama.test";
/// Long enough for a loaded machine, short enough for the tests that wait it out.
const TIMEOUT: Duration = Duration::from_secs(1);

/// One query as the scripted server saw it.
#[derive(Clone, Debug)]
struct Asked {
    tcp: bool,
    id: u16,
    kind: RecordKind,
    /// How many queries for this kind over this transport came before.
    earlier: usize,
}

/// What the server answers to a query; `None` stays silent.
type Script = Arc<dyn Fn(&Asked) -> Option<Vec<u8>> + Send + Sync>;

/// A scripted DNS server on 127.0.0.1, UDP and TCP on the same port;
/// stops when dropped.
struct Server {
    addr: SocketAddr,
    /// Queries seen: [UDP A, UDP AAAA, TCP A, TCP AAAA].
    seen: Arc<[AtomicUsize; 4]>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Server {
    async fn start(script: impl Fn(&Asked) -> Option<Vec<u8>> + Send + Sync + 'static) -> Self {
        let script: Script = Arc::new(script);
        let (udp, tcp) = loop {
            let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            let port = udp.local_addr().unwrap().port();
            if let Ok(tcp) = TcpListener::bind(("127.0.0.1", port)).await {
                break (udp, tcp);
            }
        };
        let addr = udp.local_addr().unwrap();
        let seen: Arc<[AtomicUsize; 4]> = Arc::new(Default::default());
        let (s, n) = (script.clone(), seen.clone());
        let udp_task = tokio::spawn(async move {
            let mut buf = vec![0u8; 512];
            loop {
                let (len, from) = udp.recv_from(&mut buf).await.unwrap();
                if let Some(reply) = answer(&s, &n, &buf[..len], false) {
                    udp.send_to(&reply, from).await.unwrap();
                }
            }
        });
        let (s, n) = (script, seen.clone());
        let tcp_task = tokio::spawn(async move {
            loop {
                let (mut conn, _) = tcp.accept().await.unwrap();
                let (s, n) = (s.clone(), n.clone());
                tokio::spawn(async move {
                    while let Ok(len) = conn.read_u16().await {
                        let mut msg = vec![0u8; usize::from(len)];
                        conn.read_exact(&mut msg).await.unwrap();
                        if let Some(reply) = answer(&s, &n, &msg, true) {
                            conn.write_u16(reply.len() as u16).await.unwrap();
                            conn.write_all(&reply).await.unwrap();
                        }
                    }
                });
            }
        });
        Server {
            addr,
            seen,
            tasks: vec![udp_task, tcp_task],
        }
    }

    fn seen(&self, tcp: bool, kind: RecordKind) -> usize {
        self.seen[slot(tcp, kind)].load(Ordering::SeqCst)
    }
}

fn slot(tcp: bool, kind: RecordKind) -> usize {
    usize::from(tcp) * 2 + usize::from(kind == RecordKind::Aaaa)
}

fn answer(script: &Script, seen: &[AtomicUsize; 4], msg: &[u8], tcp: bool) -> Option<Vec<u8>> {
    let (id, name, kind) = read_query(msg)?;
    assert_eq!(name, NAME);
    let earlier = seen[slot(tcp, kind)].fetch_add(1, Ordering::SeqCst);
    script(&Asked {
        tcp,
        id,
        kind,
        earlier,
    })
}

fn v4(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, 0, last)
}

fn v6(last: u16) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, last)
}

/// A NOERROR answer with the given records for the query asked.
fn reply(q: &Asked, v4s: &[(u8, u32)], v6s: &[(u16, u32)]) -> Vec<u8> {
    let mut r = Response::new(q.id, NAME, q.kind).compressed();
    match q.kind {
        RecordKind::A => {
            for (last, ttl) in v4s {
                r = r.answer(a(NAME, *ttl, v4(*last)));
            }
        }
        RecordKind::Aaaa => {
            for (last, ttl) in v6s {
                r = r.answer(aaaa(NAME, *ttl, v6(*last)));
            }
        }
    }
    r.bytes()
}

/// An answer to `q` with no record and the error code `rcode`.
fn refusal(q: &Asked, rcode: Rcode) -> Vec<u8> {
    Response::new(q.id, NAME, q.kind).rcode(rcode).bytes()
}

fn ips(v4s: &[u8], v6s: &[u16]) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = v4s.iter().map(|l| IpAddr::V4(v4(*l))).collect();
    out.extend(v6s.iter().map(|l| IpAddr::V6(v6(*l))));
    out
}

// === answers ===

#[tokio::test]
async fn a_and_aaaa_are_merged_sorted_and_deduplicated_with_the_least_ttl() {
    let server = Server::start(|q| Some(reply(q, &[(2, 30), (1, 20), (2, 25)], &[(1, 10)]))).await;
    let got = lookup(server.addr, NAME, TIMEOUT).await.unwrap();
    assert_eq!(got.addresses, ips(&[1, 2], &[1]));
    assert_eq!(got.ttl, Some(Duration::from_secs(10)));
    assert_eq!(server.seen(false, RecordKind::A), 1);
    assert_eq!(server.seen(false, RecordKind::Aaaa), 1);
}

#[tokio::test]
async fn a_truncated_answer_is_asked_again_over_tcp() {
    let server = Server::start(|q| match (q.tcp, q.kind) {
        (false, RecordKind::A) => Some(
            Response::new(q.id, NAME, q.kind)
                .truncated()
                .answer(a(NAME, 9, v4(9)))
                .bytes(),
        ),
        // Truncated as dnslib does it: no question either.
        (false, RecordKind::Aaaa) => {
            let mut r = Response::new(q.id, NAME, q.kind).truncated();
            r.question = false;
            Some(r.bytes())
        }
        (true, _) => Some(reply(q, &[(1, 7), (2, 7), (3, 8)], &[(1, 9)])),
    })
    .await;
    let got = lookup(server.addr, NAME, TIMEOUT).await.unwrap();
    assert_eq!(got.addresses, ips(&[1, 2, 3], &[1]));
    assert_eq!(got.ttl, Some(Duration::from_secs(7)));
    assert_eq!(server.seen(true, RecordKind::A), 1);
    assert_eq!(server.seen(true, RecordKind::Aaaa), 1);
}

#[tokio::test]
async fn only_a_truncated_answer_is_asked_again_over_tcp() {
    let server = Server::start(|q| match (q.tcp, q.kind) {
        (false, RecordKind::A) => Some(Response::new(q.id, NAME, q.kind).truncated().bytes()),
        _ => Some(reply(q, &[(1, 7)], &[(2, 3)])),
    })
    .await;
    let got = lookup(server.addr, NAME, TIMEOUT).await.unwrap();
    assert_eq!(got.addresses, ips(&[1], &[2]));
    assert_eq!(got.ttl, Some(Duration::from_secs(3)));
    assert_eq!(server.seen(true, RecordKind::A), 1);
    assert_eq!(server.seen(true, RecordKind::Aaaa), 0);
}

#[tokio::test]
async fn nxdomain_is_no_addresses_with_the_negative_ttl() {
    let server = Server::start(|q| {
        Some(
            Response::new(q.id, NAME, q.kind)
                .rcode(Rcode::NxDomain)
                .authority(soa("test", 60, 5))
                .bytes(),
        )
    })
    .await;
    let got = lookup(server.addr, NAME, TIMEOUT).await.unwrap();
    assert!(got.addresses.is_empty());
    assert_eq!(got.ttl, Some(Duration::from_secs(5)));
}

#[tokio::test]
async fn no_records_of_either_type_is_no_addresses() {
    let server = Server::start(|q| Some(reply(q, &[], &[]))).await;
    let got = lookup(server.addr, NAME, TIMEOUT).await.unwrap();
    assert_eq!(
        got,
        Lookup {
            addresses: vec![],
            ttl: None
        }
    );
}

#[tokio::test]
async fn servfail_is_an_error() {
    let server = Server::start(|q| Some(refusal(q, Rcode::ServFail))).await;
    let e = lookup(server.addr, NAME, TIMEOUT).await.unwrap_err();
    assert!(
        matches!(
            e,
            LookupError::Server {
                kind: RecordKind::A,
                rcode: Rcode::ServFail
            }
        ),
        "{e}"
    );
    assert_eq!(e.to_string(), "DNS server answered SERVFAIL for A");
}

#[tokio::test]
async fn one_type_failing_leaves_the_others_addresses() {
    let server = Server::start(|q| match q.kind {
        RecordKind::A => Some(reply(q, &[(4, 3)], &[])),
        RecordKind::Aaaa => Some(refusal(q, Rcode::Refused)),
    })
    .await;
    let got = lookup(server.addr, NAME, TIMEOUT).await.unwrap();
    assert_eq!(got.addresses, ips(&[4], &[]));
    assert_eq!(got.ttl, Some(Duration::from_secs(3)));
}

#[tokio::test]
async fn one_type_failing_while_the_other_is_empty_is_an_error() {
    let server = Server::start(|q| match q.kind {
        RecordKind::A => Some(reply(q, &[], &[])),
        RecordKind::Aaaa => Some(refusal(q, Rcode::Refused)),
    })
    .await;
    let e = lookup(server.addr, NAME, TIMEOUT).await.unwrap_err();
    assert!(
        matches!(
            e,
            LookupError::Server {
                kind: RecordKind::Aaaa,
                rcode: Rcode::Refused
            }
        ),
        "{e}"
    );
}

#[tokio::test]
async fn a_malformed_answer_is_an_error() {
    let server = Server::start(|q| {
        let mut m = Response::new(q.id, NAME, q.kind).bytes();
        m[7] = 1; // one answer record that is not there
        Some(m)
    })
    .await;
    let e = lookup(server.addr, NAME, TIMEOUT).await.unwrap_err();
    assert!(
        matches!(
            e,
            LookupError::Malformed {
                kind: RecordKind::A,
                ..
            }
        ),
        "{e}"
    );
}

#[tokio::test]
async fn answers_with_other_ids_are_ignored() {
    let server = Server::start(|q| {
        let mut other = q.clone();
        other.id = q.id.wrapping_add(7);
        if q.earlier == 0 {
            Some(reply(&other, &[(1, 1)], &[(1, 1)]))
        } else {
            Some(reply(q, &[(2, 1)], &[]))
        }
    })
    .await;
    let got = lookup(server.addr, NAME, TIMEOUT).await.unwrap();
    assert_eq!(got.addresses, ips(&[2], &[]));
}

#[tokio::test]
async fn an_invalid_name_is_refused_before_asking() {
    let server = Server::start(|q| Some(reply(q, &[(1, 1)], &[]))).await;
    for name in ["a..b", "10.0.0.1", ""] {
        let e = lookup(server.addr, name, TIMEOUT).await.unwrap_err();
        assert!(matches!(e, LookupError::Name(_)), "{e}");
    }
    assert_eq!(server.seen(false, RecordKind::A), 0);
}

// === timing ===

#[tokio::test]
async fn a_silent_server_times_out_in_time() {
    let server = Server::start(|_| None).await;
    let start = Instant::now();
    let e = lookup(server.addr, NAME, TIMEOUT).await.unwrap_err();
    let took = start.elapsed();
    assert!(matches!(e, LookupError::Timeout(t) if t == TIMEOUT), "{e}");
    assert!(
        took >= TIMEOUT && took < TIMEOUT + Duration::from_secs(1),
        "{took:?}"
    );
    // Each query was sent twice: once, and again at half the timeout.
    assert_eq!(server.seen(false, RecordKind::A), 2);
    assert_eq!(server.seen(false, RecordKind::Aaaa), 2);
}

#[tokio::test]
async fn a_lost_query_is_answered_when_sent_again() {
    let server = Server::start(|q| (q.earlier > 0).then(|| reply(q, &[(5, 2)], &[(5, 2)]))).await;
    let start = Instant::now();
    let got = lookup(server.addr, NAME, TIMEOUT).await.unwrap();
    assert_eq!(got.addresses, ips(&[5], &[5]));
    assert!(start.elapsed() >= TIMEOUT / 2);
}

#[tokio::test]
async fn a_type_never_answered_leaves_the_others_addresses_at_the_deadline() {
    let server = Server::start(|q| match q.kind {
        RecordKind::A => Some(reply(q, &[(6, 4)], &[])),
        RecordKind::Aaaa => None,
    })
    .await;
    let got = lookup(server.addr, NAME, TIMEOUT).await.unwrap();
    assert_eq!(got.addresses, ips(&[6], &[]));
}

#[tokio::test]
async fn a_tcp_server_that_never_answers_times_out() {
    let server = Server::start(|q| match q.tcp {
        false => Some(Response::new(q.id, NAME, q.kind).truncated().bytes()),
        true => None,
    })
    .await;
    let start = Instant::now();
    let e = lookup(server.addr, NAME, TIMEOUT).await.unwrap_err();
    assert!(matches!(e, LookupError::Timeout(_)), "{e}");
    assert!(start.elapsed() < TIMEOUT + Duration::from_secs(1));
}

#[tokio::test]
async fn a_port_with_no_server_is_an_error() {
    let port = {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap().port()
    };
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    assert!(lookup(addr, NAME, TIMEOUT).await.is_err());
}

// === the system resolver ===

#[test]
fn the_system_resolver_returns_ip_literals_as_they_are() {
    assert_eq!(
        system_lookup("127.0.0.1", 80).unwrap(),
        vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]
    );
    assert_eq!(
        system_lookup("::1", 80).unwrap(),
        vec![IpAddr::V6(Ipv6Addr::LOCALHOST)]
    );
}

#[test]
fn the_system_resolver_finds_localhost_sorted_and_deduplicated() {
    let got = system_lookup("localhost", 80).unwrap();
    assert!(!got.is_empty());
    assert!(got.iter().all(IpAddr::is_loopback), "{got:?}");
    assert!(got.windows(2).all(|w| w[0] < w[1]), "{got:?}");
}
