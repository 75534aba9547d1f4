//! DNS discovery's lookup against a real DNS server: the dnslib-based
//! `tests/fixtures/dns_server.py` (run by the venv's python from
//! scripts/ensure-deps.sh, see `common::dns`), answering from a zone file
//! the test rewrites.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::net::IpAddr;
use std::time::Duration;

use common::dns::DnsServer;

use hickory_resolver::proto::op::{Message, Query};
use hickory_resolver::proto::rr::{Name, RecordType};
use llamatap::fleet::resolver::{self, LookupError, Source};

/// Generous: the server is a Python process on a possibly busy machine.
const TIMEOUT: Duration = Duration::from_secs(5);

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

async fn lookup(
    server: std::net::SocketAddr,
    name: &str,
    timeout: Duration,
) -> Result<resolver::Lookup, LookupError> {
    resolver::lookup(&Source::server(server), name, timeout).await
}

fn zone(names: serde_json::Value) -> serde_json::Value {
    serde_json::json!({ "ttl": 1, "names": names })
}

#[tokio::test]
async fn lookup_follows_the_zone_as_it_is_rewritten() {
    let three = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
    let server = DnsServer::start(
        "rewrite",
        &zone(serde_json::json!({ "llama.test.": three })),
    );

    let got = lookup(server.addr, "llama.test", TIMEOUT).await.unwrap();
    assert_eq!(got.addresses, ips(&three));
    assert_eq!(got.ttl, Some(Duration::from_secs(1)));

    // Names are case-insensitive and the trailing dot is optional.
    let got = lookup(server.addr, "LLAMA.Test.", TIMEOUT).await.unwrap();
    assert_eq!(got.addresses, ips(&three));

    server.set_zone(&zone(
        serde_json::json!({ "llama.test": ["127.0.0.4", "127.0.0.2"] }),
    ));
    let got = lookup(server.addr, "llama.test", TIMEOUT).await.unwrap();
    assert_eq!(got.addresses, ips(&["127.0.0.2", "127.0.0.4"]));

    // Present with no addresses: no members now, for the SOA's TTL.
    server.set_zone(&zone(serde_json::json!({ "llama.test": [] })));
    let got = lookup(server.addr, "llama.test", TIMEOUT).await.unwrap();
    assert!(got.addresses.is_empty());
    assert_eq!(got.ttl, Some(Duration::from_secs(1)));

    // Absent: NXDOMAIN, also no members (this server sends no SOA).
    server.set_zone(&zone(serde_json::json!({ "other.test": ["127.0.0.9"] })));
    let got = lookup(server.addr, "llama.test", TIMEOUT).await.unwrap();
    assert!(got.addresses.is_empty());
    assert_eq!(got.ttl, None);

    // SERVFAIL: an error, so the caller keeps its members.
    server.set_zone(&serde_json::json!({ "servfail": true, "names": { "llama.test": three } }));
    let e = lookup(server.addr, "llama.test", TIMEOUT)
        .await
        .unwrap_err();
    assert!(matches!(e, LookupError::Server { .. }), "{e}");

    server.set_zone(&zone(serde_json::json!({ "llama.test": ["127.0.0.5"] })));
    let got = lookup(server.addr, "llama.test", TIMEOUT).await.unwrap();
    assert_eq!(got.addresses, ips(&["127.0.0.5"]));
}

#[tokio::test]
async fn ipv4_and_ipv6_are_merged_and_a_large_answer_comes_over_tcp() {
    // 40 A records do not fit in 512 bytes of UDP: dnslib sets TC and the
    // client asks again over TCP.
    let mut many: Vec<String> = (1..=40).map(|i| format!("10.1.0.{i}")).collect();
    many.extend([
        "fd00::2".to_owned(),
        "fd00::1".to_owned(),
        "10.1.0.7".to_owned(),
    ]);
    let server = DnsServer::start("large", &zone(serde_json::json!({ "big.test": many })));

    // Over UDP alone, the answer is truncated.
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut query = Message::query();
    query.metadata.id = 42;
    query.metadata.recursion_desired = true;
    query.add_query(Query::query(
        "big.test.".parse::<Name>().unwrap(),
        RecordType::A,
    ));
    udp.send_to(&query.to_vec().unwrap(), server.addr).unwrap();
    let mut buf = [0u8; 4096];
    let n = udp.recv(&mut buf).unwrap();
    let answer = Message::from_vec(&buf[..n]).unwrap();
    assert_eq!(answer.metadata.id, 42);
    assert!(answer.metadata.truncation);
    assert!(answer.answers.is_empty());
    // The question is echoed, as real servers do (hickory ignores an
    // answer without it).
    assert_eq!(answer.queries, query.queries);

    let got = lookup(server.addr, "big.test", TIMEOUT).await.unwrap();
    let mut want: Vec<IpAddr> = (1..=40)
        .map(|i| format!("10.1.0.{i}").parse().unwrap())
        .collect();
    want.sort();
    want.extend(ips(&["fd00::1", "fd00::2"]));
    assert_eq!(got.addresses, want);
    assert_eq!(got.ttl, Some(Duration::from_secs(1)));
}
