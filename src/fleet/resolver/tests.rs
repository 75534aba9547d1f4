#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! [`lookup`] from a configured server, against the scripted server of
//! [`testkit`]: how answers become a result, and timing.

mod system;
mod testkit;

use std::time::{Duration, Instant};

use hickory_resolver::proto::op::Message;

use super::*;
use testkit::*;

async fn ask(server: &Server, name: &str) -> Result<Lookup, LookupError> {
    lookup(&Source::server(server.addr), name, TIMEOUT).await
}

// === answers ===

#[tokio::test]
async fn a_and_aaaa_are_merged_sorted_and_deduplicated_with_the_least_ttl() {
    let server = Server::start(|q| Some(reply(q, &[(2, 30), (1, 20), (2, 25)], &[(1, 10)]))).await;
    let got = ask(&server, NAME).await.unwrap();
    assert_eq!(got.addresses, ips(&[1, 2], &[1]));
    assert_eq!(got.ttl, Some(Duration::from_secs(10)));
    assert_eq!(server.seen(false, RecordType::A), 1);
    assert_eq!(server.seen(false, RecordType::AAAA), 1);
    assert_eq!(server.names(), [NAME]);
}

#[tokio::test]
async fn records_of_other_names_are_left_out_and_cnames_followed_with_their_ttl() {
    let server = Server::start(|q| {
        let mut m = response(q, ResponseCode::NoError);
        let target = Name::from_str("pool.test.").unwrap();
        let other = Name::from_str("other.test.").unwrap();
        if q.kind == RecordType::A {
            let cname = RData::CNAME(hickory_resolver::proto::rr::rdata::CNAME(target.clone()));
            m.add_answer(Record::from_rdata(qname(q), 4, cname));
            m.add_answer(Record::from_rdata(target, 60, RData::A(v4(1).into())));
            m.add_answer(Record::from_rdata(other, 1, RData::A(v4(9).into())));
        }
        Some(bytes(&m))
    })
    .await;
    let got = ask(&server, NAME).await.unwrap();
    assert_eq!(got.addresses, ips(&[1], &[]));
    assert_eq!(got.ttl, Some(Duration::from_secs(4)));
}

#[tokio::test]
async fn a_truncated_answer_is_asked_again_over_tcp() {
    let server = Server::start(|q| match q.tcp {
        false => Some(truncated(q)),
        true => Some(reply(q, &[(1, 7), (2, 7), (3, 8)], &[(1, 9)])),
    })
    .await;
    let got = ask(&server, NAME).await.unwrap();
    assert_eq!(got.addresses, ips(&[1, 2, 3], &[1]));
    assert_eq!(got.ttl, Some(Duration::from_secs(7)));
    assert_eq!(server.seen(true, RecordType::A), 1);
    assert_eq!(server.seen(true, RecordType::AAAA), 1);
}

#[tokio::test]
async fn only_a_truncated_answer_is_asked_again_over_tcp() {
    let server = Server::start(|q| match (q.tcp, q.kind) {
        (false, RecordType::A) => Some(truncated(q)),
        _ => Some(reply(q, &[(1, 7)], &[(2, 3)])),
    })
    .await;
    let got = ask(&server, NAME).await.unwrap();
    assert_eq!(got.addresses, ips(&[1], &[2]));
    assert_eq!(got.ttl, Some(Duration::from_secs(3)));
    assert_eq!(server.seen(true, RecordType::A), 1);
    assert_eq!(server.seen(true, RecordType::AAAA), 0);
}

#[tokio::test]
async fn nxdomain_is_no_addresses_with_the_negative_ttl() {
    let server = Server::start(|q| Some(negative(q, ResponseCode::NXDomain, 60, 5))).await;
    let got = ask(&server, NAME).await.unwrap();
    assert!(got.addresses.is_empty());
    assert_eq!(got.ttl, Some(Duration::from_secs(5)));
}

#[tokio::test]
async fn no_records_of_either_type_is_no_addresses() {
    let server = Server::start(|q| Some(reply(q, &[], &[]))).await;
    let got = ask(&server, NAME).await.unwrap();
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
    let server = Server::start(|q| Some(refusal(q, ResponseCode::ServFail))).await;
    let e = ask(&server, NAME).await.unwrap_err();
    assert!(
        matches!(
            e,
            LookupError::Server {
                kind: RecordType::A,
                rcode: ResponseCode::ServFail
            }
        ),
        "{e}"
    );
    assert_eq!(e.to_string(), "DNS server answered SERVFAIL for A");
}

#[tokio::test]
async fn one_type_failing_leaves_the_others_addresses() {
    let server = Server::start(|q| match q.kind {
        RecordType::A => Some(reply(q, &[(4, 3)], &[])),
        _ => Some(refusal(q, ResponseCode::Refused)),
    })
    .await;
    let got = ask(&server, NAME).await.unwrap();
    assert_eq!(got.addresses, ips(&[4], &[]));
    assert_eq!(got.ttl, Some(Duration::from_secs(3)));
}

#[tokio::test]
async fn one_type_failing_while_the_other_is_empty_is_an_error() {
    let server = Server::start(|q| match q.kind {
        RecordType::A => Some(reply(q, &[], &[])),
        _ => Some(refusal(q, ResponseCode::Refused)),
    })
    .await;
    let e = ask(&server, NAME).await.unwrap_err();
    assert!(
        matches!(
            e,
            LookupError::Server {
                kind: RecordType::AAAA,
                rcode: ResponseCode::Refused
            }
        ),
        "{e}"
    );
}

#[tokio::test]
async fn a_malformed_answer_is_an_error() {
    let server = Server::start(|q| {
        let mut m = refusal(q, ResponseCode::NoError);
        m[7] = 1; // one answer record that is not there
        Some(m)
    })
    .await;
    let e = ask(&server, NAME).await.unwrap_err();
    assert!(
        matches!(
            e,
            LookupError::Failed {
                kind: RecordType::A,
                ..
            }
        ),
        "{e}"
    );
}

#[tokio::test]
async fn answers_with_other_ids_are_ignored() {
    let server = Server::start(|q| {
        let mut m = Message::from_vec(&reply(q, &[(1, 1)], &[(1, 1)])).unwrap();
        if q.earlier == 0 {
            m.metadata.id = q.query.metadata.id.wrapping_add(7);
            return Some(bytes(&m));
        }
        Some(reply(q, &[(2, 1)], &[]))
    })
    .await;
    let got = ask(&server, NAME).await.unwrap();
    assert_eq!(got.addresses, ips(&[2], &[]));
}

#[tokio::test]
async fn an_invalid_name_is_refused_before_asking() {
    let server = Server::start(|q| Some(reply(q, &[(1, 1)], &[]))).await;
    for name in ["a..b", "10.0.0.1", "::1", ""] {
        let e = ask(&server, name).await.unwrap_err();
        assert!(matches!(e, LookupError::Name(_)), "{name}: {e}");
    }
    assert_eq!(server.seen(false, RecordType::A), 0);
}

// === timing ===

#[tokio::test]
async fn a_silent_server_times_out_in_time_having_been_asked_again() {
    let server = Server::start(|_| None).await;
    let start = Instant::now();
    let e = ask(&server, NAME).await.unwrap_err();
    let took = start.elapsed();
    assert!(matches!(e, LookupError::Timeout(t) if t == TIMEOUT), "{e}");
    assert!(
        took >= TIMEOUT / 2 && took < TIMEOUT + Duration::from_secs(1),
        "{took:?}"
    );
    assert!(server.seen(false, RecordType::A) >= 2);
    assert!(server.seen(false, RecordType::AAAA) >= 2);
}

#[tokio::test]
async fn a_lost_query_is_answered_when_sent_again() {
    let server = Server::start(|q| (q.earlier > 0).then(|| reply(q, &[(5, 2)], &[(5, 2)]))).await;
    let got = ask(&server, NAME).await.unwrap();
    assert_eq!(got.addresses, ips(&[5], &[5]));
}

#[tokio::test]
async fn a_type_never_answered_leaves_the_others_addresses_at_the_deadline() {
    let server = Server::start(|q| match q.kind {
        RecordType::A => Some(reply(q, &[(6, 4)], &[])),
        _ => None,
    })
    .await;
    let got = ask(&server, NAME).await.unwrap();
    assert_eq!(got.addresses, ips(&[6], &[]));
}

#[tokio::test]
async fn a_tcp_server_that_never_answers_times_out() {
    let server = Server::start(|q| match q.tcp {
        false => Some(truncated(q)),
        true => None,
    })
    .await;
    let start = Instant::now();
    let e = ask(&server, NAME).await.unwrap_err();
    assert!(matches!(e, LookupError::Timeout(_)), "{e}");
    assert!(start.elapsed() < TIMEOUT + Duration::from_secs(1));
}

#[tokio::test]
async fn a_port_with_no_server_is_an_error() {
    let port = {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap().port()
    };
    let source = Source::server(([127, 0, 0, 1], port).into());
    assert!(lookup(&source, NAME, TIMEOUT).await.is_err());
}
