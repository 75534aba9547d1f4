#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A scripted DNS server for the resolver's tests: UDP and TCP on one
//! loopback port, answering each query as the test's script says, with
//! hickory's own message types.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hickory_resolver::proto::op::{Message, ResponseCode};
use hickory_resolver::proto::rr::rdata::SOA;
use hickory_resolver::proto::rr::{Name, RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};
use tokio::task::JoinHandle;

pub(super) const NAME: &str = "llama.test";
/// Long enough for a loaded machine, short enough for the tests that wait it out.
pub(super) const TIMEOUT: Duration = Duration::from_secs(1);

/// One query as the scripted server saw it.
#[derive(Clone, Debug)]
pub(super) struct Asked {
    pub(super) tcp: bool,
    pub(super) query: Message,
    /// The name asked, lowercase, without the trailing dot.
    pub(super) name: String,
    pub(super) kind: RecordType,
    /// How many queries for this kind over this transport came before.
    pub(super) earlier: usize,
}

/// What the server answers to a query; `None` stays silent.
type Script = Arc<dyn Fn(&Asked) -> Option<Vec<u8>> + Send + Sync>;

/// A scripted DNS server on 127.0.0.1, UDP and TCP on the same port;
/// stops when dropped.
pub(super) struct Server {
    pub(super) addr: SocketAddr,
    /// Queries seen: [UDP A, UDP AAAA, TCP A, TCP AAAA].
    seen: Arc<[AtomicUsize; 4]>,
    /// The names asked, in order (both types, both transports).
    names: Arc<Mutex<Vec<String>>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

struct Shared {
    script: Script,
    seen: Arc<[AtomicUsize; 4]>,
    names: Arc<Mutex<Vec<String>>>,
}

impl Server {
    pub(super) async fn start(
        script: impl Fn(&Asked) -> Option<Vec<u8>> + Send + Sync + 'static,
    ) -> Self {
        let (udp, tcp) = loop {
            let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            let port = udp.local_addr().unwrap().port();
            if let Ok(tcp) = TcpListener::bind(("127.0.0.1", port)).await {
                break (udp, tcp);
            }
        };
        let addr = udp.local_addr().unwrap();
        let shared = Arc::new(Shared {
            script: Arc::new(script),
            seen: Arc::default(),
            names: Arc::default(),
        });
        let s = shared.clone();
        let udp_task = tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            loop {
                let (len, from) = udp.recv_from(&mut buf).await.unwrap();
                if let Some(reply) = answer(&s, &buf[..len], false) {
                    udp.send_to(&reply, from).await.unwrap();
                }
            }
        });
        let s = shared.clone();
        let tcp_task = tokio::spawn(async move {
            loop {
                let (mut conn, _) = tcp.accept().await.unwrap();
                let s = s.clone();
                tokio::spawn(async move {
                    while let Ok(len) = conn.read_u16().await {
                        let mut msg = vec![0u8; usize::from(len)];
                        conn.read_exact(&mut msg).await.unwrap();
                        if let Some(reply) = answer(&s, &msg, true) {
                            conn.write_u16(reply.len() as u16).await.unwrap();
                            conn.write_all(&reply).await.unwrap();
                        }
                    }
                });
            }
        });
        Server {
            addr,
            seen: shared.seen.clone(),
            names: shared.names.clone(),
            tasks: vec![udp_task, tcp_task],
        }
    }

    pub(super) fn seen(&self, tcp: bool, kind: RecordType) -> usize {
        self.seen[slot(tcp, kind)].load(Ordering::SeqCst)
    }

    /// The distinct names asked, in the order first asked.
    pub(super) fn names(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for n in self.names.lock().unwrap().iter() {
            if !out.contains(n) {
                out.push(n.clone());
            }
        }
        out
    }
}

fn slot(tcp: bool, kind: RecordType) -> usize {
    usize::from(tcp) * 2 + usize::from(kind == RecordType::AAAA)
}

fn answer(s: &Shared, msg: &[u8], tcp: bool) -> Option<Vec<u8>> {
    let query = Message::from_vec(msg).ok()?;
    let q = query.queries.first()?.clone();
    let name = q.name().to_string().trim_end_matches('.').to_lowercase();
    let kind = q.query_type();
    s.names.lock().unwrap().push(name.clone());
    let earlier = s.seen[slot(tcp, kind)].fetch_add(1, Ordering::SeqCst);
    (s.script)(&Asked {
        tcp,
        query,
        name,
        kind,
        earlier,
    })
}

pub(super) fn v4(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, 0, last)
}

pub(super) fn v6(last: u16) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, last)
}

pub(super) fn qname(q: &Asked) -> Name {
    q.query.queries[0].name().clone()
}

/// The response to `q` before records are added: its id and question.
pub(super) fn response(q: &Asked, rcode: ResponseCode) -> Message {
    let mut m = q.query.clone().into_response();
    m.metadata.response_code = rcode;
    m.metadata.recursion_available = true;
    m
}

pub(super) fn bytes(m: &Message) -> Vec<u8> {
    m.to_vec().unwrap()
}

/// A NOERROR answer with the given records for the query asked.
pub(super) fn reply(q: &Asked, v4s: &[(u8, u32)], v6s: &[(u16, u32)]) -> Vec<u8> {
    let mut m = response(q, ResponseCode::NoError);
    let name = qname(q);
    if q.kind == RecordType::A {
        for (last, ttl) in v4s {
            m.add_answer(Record::from_rdata(
                name.clone(),
                *ttl,
                RData::A(v4(*last).into()),
            ));
        }
    } else {
        for (last, ttl) in v6s {
            m.add_answer(Record::from_rdata(
                name.clone(),
                *ttl,
                RData::AAAA(v6(*last).into()),
            ));
        }
    }
    bytes(&m)
}

/// An answer to `q` with no record and the error code `rcode`.
pub(super) fn refusal(q: &Asked, rcode: ResponseCode) -> Vec<u8> {
    bytes(&response(q, rcode))
}

/// An answer with no record and an `SOA` of zone `test` (TTL, MINIMUM).
pub(super) fn negative(q: &Asked, rcode: ResponseCode, ttl: u32, minimum: u32) -> Vec<u8> {
    let mut m = response(q, rcode);
    let soa = SOA::new(
        Name::from_str("ns.test.").unwrap(),
        Name::from_str("hostmaster.test.").unwrap(),
        1,
        3600,
        600,
        86400,
        minimum,
    );
    m.add_authority(Record::from_rdata(
        Name::from_str("test.").unwrap(),
        ttl,
        RData::SOA(soa),
    ));
    bytes(&m)
}

/// A truncated answer with no records, the question echoed.
pub(super) fn truncated(q: &Asked) -> Vec<u8> {
    let mut m = response(q, ResponseCode::NoError);
    m.metadata.truncation = true;
    bytes(&m)
}

pub(super) fn ips(v4s: &[u8], v6s: &[u16]) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = v4s.iter().map(|l| IpAddr::V4(v4(*l))).collect();
    out.extend(v6s.iter().map(|l| IpAddr::V6(v6(*l))));
    out
}
