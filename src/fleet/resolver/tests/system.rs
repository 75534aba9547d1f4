#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! [`lookup`] with the system's rules ([`Source::configured`]) applied to a
//! configuration of the test's own naming the scripted server of
//! [`super::testkit`]: search domains, `ndots`, hosts and TTLs; and
//! [`Source::system`] on this machine.

use std::net::Ipv4Addr;
use std::time::Duration;

use super::testkit::*;
use crate::fleet::resolver::*;

/// The system's rules with `server` as nameserver and `search` domains.
fn source(server: &Server, search: &[&str], ndots: usize, hosts: Hosts) -> Source {
    let config = ResolverConfig::from_parts(
        None,
        search.iter().map(|d| Name::from_str(d).unwrap()).collect(),
        Source::server(server.addr).config.name_servers().to_vec(),
    );
    let mut options = ResolverOpts::default();
    options.ndots = ndots;
    Source::configured(config, options, hosts)
}

/// Answers `names` (`(name, last byte, ttl)`) with one A record each;
/// NXDOMAIN for every other name, with a negative TTL of 30 s.
fn zone(names: &'static [(&'static str, u8, u32)]) -> impl Fn(&Asked) -> Option<Vec<u8>> {
    move |q| match names.iter().find(|(n, _, _)| *n == q.name) {
        Some((_, last, ttl)) => Some(reply(q, &[(*last, *ttl)], &[])),
        None => Some(negative(q, ResponseCode::NXDomain, 30, 30)),
    }
}

#[tokio::test]
async fn a_short_name_resolves_through_the_search_domain_with_its_ttl() {
    let server = Server::start(zone(&[("llama.svc.test", 3, 7), ("llama", 9, 1)])).await;
    let got = lookup(
        &source(&server, &["svc.test"], 1, Hosts::default()),
        "llama",
        TIMEOUT,
    )
    .await
    .unwrap();
    assert_eq!(got.addresses, ips(&[3], &[]));
    assert_eq!(got.ttl, Some(Duration::from_secs(7)));
    assert_eq!(server.names(), ["llama.svc.test"]);
}

#[tokio::test]
async fn search_domains_are_tried_in_order_then_the_name_as_is() {
    let server = Server::start(zone(&[("llama", 5, 2)])).await;
    let got = lookup(
        &source(&server, &["a.test", "b.test"], 1, Hosts::default()),
        "llama",
        TIMEOUT,
    )
    .await
    .unwrap();
    assert_eq!(got.addresses, ips(&[5], &[]));
    assert_eq!(got.ttl, Some(Duration::from_secs(2)));
    assert_eq!(server.names(), ["llama.a.test", "llama.b.test", "llama"]);
}

#[tokio::test]
async fn a_name_with_ndots_dots_is_asked_as_is_first_and_a_trailing_dot_alone() {
    let server = Server::start(zone(&[(NAME, 4, 3), ("llama.test.svc.test", 8, 3)])).await;
    let src = source(&server, &["svc.test"], 1, Hosts::default());
    let got = lookup(&src, NAME, TIMEOUT).await.unwrap();
    assert_eq!(got.addresses, ips(&[4], &[]));
    assert_eq!(server.names(), [NAME]);

    // With ndots:2, one dot is too few: the search domain comes first.
    let server = Server::start(zone(&[(NAME, 4, 3), ("llama.test.svc.test", 8, 3)])).await;
    let src = source(&server, &["svc.test"], 2, Hosts::default());
    let got = lookup(&src, NAME, TIMEOUT).await.unwrap();
    assert_eq!(got.addresses, ips(&[8], &[]));

    let server = Server::start(zone(&[])).await;
    let src = source(&server, &["svc.test"], 5, Hosts::default());
    let got = lookup(&src, "llama.", TIMEOUT).await.unwrap();
    assert!(got.addresses.is_empty());
    assert_eq!(server.names(), ["llama"]);
}

#[tokio::test]
async fn a_name_found_nowhere_is_no_addresses_with_the_negative_ttl() {
    let server = Server::start(zone(&[])).await;
    let got = lookup(
        &source(&server, &["a.test", "b.test"], 1, Hosts::default()),
        "llama",
        TIMEOUT,
    )
    .await
    .unwrap();
    assert!(got.addresses.is_empty());
    assert_eq!(got.ttl, Some(Duration::from_secs(30)));
    assert_eq!(server.names().len(), 3);
}

#[tokio::test]
async fn a_failing_search_name_ends_the_search_with_its_error() {
    let server = Server::start(|q| match q.name.as_str() {
        "llama.a.test" => Some(refusal(q, ResponseCode::ServFail)),
        _ => Some(reply(q, &[(1, 1)], &[])),
    })
    .await;
    let e = lookup(
        &source(&server, &["a.test", "b.test"], 1, Hosts::default()),
        "llama",
        TIMEOUT,
    )
    .await
    .unwrap_err();
    assert!(matches!(e, LookupError::Server { .. }), "{e}");
    assert_eq!(server.names(), ["llama.a.test"]);
}

#[tokio::test]
async fn a_hosts_entry_answers_without_asking_dns() {
    let server = Server::start(zone(&[("llama.svc.test", 3, 7)])).await;
    let mut hosts = Hosts::default();
    hosts
        .read_hosts_conf("10.0.0.9 llama\n10.0.0.8 llama\nfd00::9 llama\n".as_bytes())
        .unwrap();
    let got = lookup(&source(&server, &["svc.test"], 1, hosts), "llama", TIMEOUT)
        .await
        .unwrap();
    assert_eq!(got.addresses, ips(&[8, 9], &[9]));
    assert_eq!(got.ttl, None, "a hosts file gives no TTL");
    assert!(server.names().is_empty());
}

/// `/etc/resolv.conf`'s own syntax, as hickory reads it (the nameserver's
/// port, which resolv.conf cannot say, set afterwards).
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_resolv_conf_gives_search_domains_ndots_and_ttls() {
    let server = Server::start(zone(&[("llama.b.test", 6, 9)])).await;
    let text = "nameserver 127.0.0.1\nsearch a.test b.test\noptions ndots:2 timeout:1 attempts:1\n";
    let (config, options) = hickory_resolver::system_conf::parse_resolv_conf(text).unwrap();
    assert_eq!((options.ndots, options.attempts), (2, 1));
    let (domain, search, mut servers) = config.into_parts();
    for s in &mut servers {
        for c in &mut s.connections {
            c.port = server.addr.port();
        }
    }
    let config = ResolverConfig::from_parts(domain, search, servers);
    let src = Source::configured(config, options, Hosts::default());
    let got = lookup(&src, "llama", TIMEOUT).await.unwrap();
    assert_eq!(got.addresses, ips(&[6], &[]));
    assert_eq!(got.ttl, Some(Duration::from_secs(9)));
    assert_eq!(server.names(), ["llama.a.test", "llama.b.test"]);
}

#[tokio::test]
async fn this_machine_resolves_localhost() {
    let mut system = SystemSource::default();
    let source = system.current().unwrap();
    // Unchanged files: the same configuration, not read again.
    assert_eq!(
        format!("{source:?}"),
        format!("{:?}", system.current().unwrap())
    );
    let got = lookup(&source, "localhost", TIMEOUT).await.unwrap();
    assert!(!got.addresses.is_empty());
    assert!(got.addresses.iter().all(IpAddr::is_loopback), "{got:?}");
    assert!(got.addresses.windows(2).all(|w| w[0] < w[1]), "{got:?}");
    assert!(got.addresses.contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)));
}
