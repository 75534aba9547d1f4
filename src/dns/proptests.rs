#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Property tests: no input makes the parser panic, and responses built by
//! hand for any address set read back as built.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use super::testkit::{a, aaaa, cname, soa, Response};
use super::*;

fn kind() -> impl Strategy<Value = RecordKind> {
    prop_oneof![Just(RecordKind::A), Just(RecordKind::Aaaa)]
}

/// A valid host name of 1 to 4 labels, mixed case.
fn host() -> impl Strategy<Value = String> {
    prop::collection::vec("[a-zA-Z0-9_-]{1,12}", 1..5)
        .prop_map(|l| l.join("."))
        .prop_filter("an IP literal", |n| n.parse::<IpAddr>().is_err())
}

/// Flips the case of the letters whose bit in `mask` is set.
fn recase(name: &str, mask: u64) -> String {
    name.chars()
        .enumerate()
        .map(|(i, c)| {
            if mask >> (i % 64) & 1 == 1 {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect()
}

/// A valid response header and question for id 7, `llama.test`, A; then
/// whatever bytes follow.
fn prefixed(counts: [u8; 6], tail: &[u8]) -> Vec<u8> {
    let mut m = vec![0, 7, 0x81, 0x80, 0, 1];
    m.extend(counts);
    m.extend(b"\x05llama\x04test\x00\x00\x01\x00\x01");
    m.extend(tail);
    m
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..600),
        id in any::<u16>(),
        kind in kind(),
    ) {
        let _ = parse(&bytes, id, "llama.test", kind);
        // With the id and flags of a response, to get past the header.
        let mut m = bytes.clone();
        if m.len() >= 4 {
            m[..4].copy_from_slice(&[id.to_be_bytes()[0], id.to_be_bytes()[1], 0x81, 0x80]);
        }
        let _ = parse(&m, id, "llama.test", kind);
    }

    #[test]
    fn arbitrary_records_after_a_valid_question_never_panic(
        counts in any::<[u8; 6]>(),
        tail in prop::collection::vec(any::<u8>(), 0..400),
        kind in kind(),
    ) {
        let _ = parse(&prefixed(counts, &tail), 7, "llama.test", kind);
    }

    #[test]
    fn any_byte_changed_in_a_valid_response_never_panics(
        at in any::<prop::sample::Index>(),
        value in any::<u8>(),
    ) {
        let mut m = Response::new(7, "llama.test", RecordKind::A)
            .compressed()
            .answer(cname("llama.test", 9, "end.test"))
            .answer(a("end.test", 3, Ipv4Addr::new(10, 0, 0, 1)))
            .authority(soa("test", 5, 5))
            .bytes();
        let i = at.index(m.len());
        m[i] = value;
        let _ = parse(&m, 7, "llama.test", RecordKind::A);
        let _ = parse(&m, 7, "llama.test", RecordKind::Aaaa);
    }

    #[test]
    fn built_responses_read_back_as_built(
        name in host(),
        case_mask in any::<u64>(),
        id in any::<u16>(),
        v4 in prop::collection::vec((any::<u32>(), 0u32..=0x7fff_ffff), 0..20),
        v6 in prop::collection::vec((any::<u128>(), 0u32..=0x7fff_ffff), 0..20),
        chain in prop::collection::vec(0u32..=0x7fff_ffff, 0..4),
        compressed in any::<bool>(),
        ipv6 in any::<bool>(),
    ) {
        let kind = if ipv6 { RecordKind::Aaaa } else { RecordKind::A };
        let mut r = Response::new(id, &recase(&name, case_mask), kind);
        if compressed {
            r = r.compressed();
        }
        // name -> c0.name -> c1.name ... each with its TTL.
        let mut owner = name.clone();
        for (i, ttl) in chain.iter().enumerate() {
            let target = format!("c{i}.{name}");
            r = r.answer(cname(&owner, *ttl, &target));
            owner = target;
        }
        let cap = chain.iter().copied().min().unwrap_or(u32::MAX);
        let want: Vec<(IpAddr, u32)> = if ipv6 {
            v6.iter().map(|(ip, ttl)| (IpAddr::V6(Ipv6Addr::from(*ip)), (*ttl).min(cap))).collect()
        } else {
            v4.iter().map(|(ip, ttl)| (IpAddr::V4(Ipv4Addr::from(*ip)), (*ttl).min(cap))).collect()
        };
        for (ip, ttl) in &v4 {
            r = r.answer(a(&owner, *ttl, Ipv4Addr::from(*ip)));
        }
        for (ip, ttl) in &v6 {
            r = r.answer(aaaa(&owner, *ttl, Ipv6Addr::from(*ip)));
        }
        let got = parse(&r.bytes(), id, &recase(&name, !case_mask), kind).unwrap();
        prop_assert_eq!(got.rcode, Rcode::NoError);
        prop_assert!(!got.truncated);
        prop_assert_eq!(got.addresses, want);
        prop_assert_eq!(got.negative_ttl, None);
    }

    #[test]
    fn queries_carry_the_name_lowercased(name in host(), id in any::<u16>(), kind in kind()) {
        let q = query(id, &name, kind).unwrap();
        let (qid, qname, qkind) = testkit::read_query(&q).unwrap();
        prop_assert_eq!(qid, id);
        prop_assert_eq!(qname, name.to_ascii_lowercase());
        prop_assert_eq!(qkind, kind);
        prop_assert_eq!(q.len(), 12 + name.len() + 2 + 4);
    }
}
