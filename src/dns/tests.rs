#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::testkit::{a, aaaa, cname, rr, soa, wire, Response};
use super::*;

const NAME: &str = "llama.test";

fn v4(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, 0, last)
}

fn ok(msg: &[u8], kind: RecordKind) -> Answer {
    parse(msg, 7, NAME, kind).unwrap()
}

fn err(msg: &[u8], kind: RecordKind) -> DnsError {
    parse(msg, 7, NAME, kind).unwrap_err()
}

// === query ===

#[test]
fn a_query_is_the_standard_recursive_query() {
    let q = query(0x1234, "Llama.Test.", RecordKind::A).unwrap();
    let mut want = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    want.extend(b"\x05llama\x04test\x00");
    want.extend([0, 1, 0, 1]);
    assert_eq!(q, want);
}

#[test]
fn aaaa_query_asks_type_28_and_the_trailing_dot_is_optional() {
    let with = query(9, "llama.test.", RecordKind::Aaaa).unwrap();
    let without = query(9, "llama.test", RecordKind::Aaaa).unwrap();
    assert_eq!(with, without);
    assert_eq!(&with[with.len() - 4..], &[0, 28, 0, 1]);
}

#[test]
fn valid_names_are_accepted() {
    let label63 = "a".repeat(63);
    // 63 + 1 + 63 + 1 + 63 + 1 + 61 = 253.
    let name253 = format!("{label63}.{label63}.{label63}.{}", "b".repeat(61));
    assert_eq!(name253.len(), 253);
    for name in [
        "a",
        "a.",
        "x-1_y.svc.cluster.local",
        "_grpc._tcp.llama",
        "UPPER.case",
        "1.2.3",
        "1.2.3.4.5",
        "0x1.test",
        label63.as_str(),
        name253.as_str(),
        &format!("{name253}."),
    ] {
        assert!(query(1, name, RecordKind::A).is_ok(), "{name:?}");
    }
}

#[test]
fn invalid_names_are_refused_with_a_reason() {
    let label64 = "a".repeat(64);
    let name254 = format!("{}.{}", "a".repeat(127), "b".repeat(126));
    assert_eq!(name254.len(), 254);
    for name in [
        "",
        ".",
        "..",
        "a..b",
        ".a",
        "a.b..",
        "a b",
        "a/b",
        "a:b",
        "é.test",
        "a*.test",
        label64.as_str(),
        name254.as_str(),
        "127.0.0.1",
        "::1",
        "fe80::1",
    ] {
        match query(1, name, RecordKind::A) {
            Err(DnsError::InvalidName { name: n, .. }) => assert_eq!(n, name),
            other => panic!("{name:?}: {other:?}"),
        }
    }
}

#[test]
fn every_ascii_byte_in_a_label_is_checked() {
    for b in 0u8..=127 {
        let name = format!("x{}y.test", b as char);
        let allowed = b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
        // A dot just splits the label.
        let expect = allowed || b == b'.';
        assert_eq!(query(1, &name, RecordKind::A).is_ok(), expect, "byte {b}");
    }
}

#[test]
fn rcode_bits_round_trip_for_all_sixteen_codes() {
    for bits in 0u8..16 {
        let rcode = Rcode::from_bits(bits);
        assert_eq!(rcode.bits(), bits);
        assert_eq!(Rcode::from_bits(bits | 0xf0), rcode, "high bits ignored");
        assert!(!rcode.to_string().is_empty());
    }
    assert_eq!(Rcode::from_bits(3), Rcode::NxDomain);
    assert_eq!(Rcode::ServFail.to_string(), "SERVFAIL");
}

// === parse: addresses ===

#[test]
fn a_records_are_read_in_order_with_their_ttls() {
    let msg = Response::new(7, NAME, RecordKind::A)
        .answer(a(NAME, 30, v4(2)))
        .answer(a(NAME, 20, v4(1)))
        .bytes();
    let got = ok(&msg, RecordKind::A);
    assert_eq!(got.rcode, Rcode::NoError);
    assert!(!got.truncated);
    assert_eq!(
        got.addresses,
        vec![(IpAddr::V4(v4(2)), 30), (IpAddr::V4(v4(1)), 20)]
    );
    assert_eq!(got.negative_ttl, None);
}

#[test]
fn aaaa_records_are_read() {
    let ip: Ipv6Addr = "fd00::1:2".parse().unwrap();
    let msg = Response::new(7, NAME, RecordKind::Aaaa)
        .answer(aaaa(NAME, 5, ip))
        .bytes();
    assert_eq!(
        ok(&msg, RecordKind::Aaaa).addresses,
        vec![(IpAddr::V6(ip), 5)]
    );
}

#[test]
fn records_of_other_types_classes_and_owners_are_skipped() {
    let mut chaos = a(NAME, 1, v4(9));
    chaos.class = 3;
    let msg = Response::new(7, NAME, RecordKind::A)
        .answer(rr(NAME, 16, 1, b"\x03txt".to_vec()))
        .answer(aaaa(NAME, 1, Ipv6Addr::LOCALHOST))
        .answer(chaos)
        .answer(a("other.test", 1, v4(8)))
        .answer(a(NAME, 4, v4(3)))
        .bytes();
    assert_eq!(
        ok(&msg, RecordKind::A).addresses,
        vec![(IpAddr::V4(v4(3)), 4)]
    );
}

#[test]
fn owner_and_question_compare_case_insensitively() {
    let msg = Response::new(7, "LlAmA.TeSt.", RecordKind::A)
        .answer(a("LLAMA.test", 3, v4(1)))
        .bytes();
    assert_eq!(ok(&msg, RecordKind::A).addresses.len(), 1);
}

#[test]
fn a_ttl_with_the_top_bit_set_reads_as_zero() {
    let msg = Response::new(7, NAME, RecordKind::A)
        .answer(a(NAME, 0x8000_0001, v4(1)))
        .answer(a(NAME, 0x7fff_ffff, v4(2)))
        .bytes();
    let ttls: Vec<u32> = ok(&msg, RecordKind::A)
        .addresses
        .iter()
        .map(|x| x.1)
        .collect();
    assert_eq!(ttls, vec![0, 0x7fff_ffff]);
}

#[test]
fn an_address_record_of_the_wrong_length_is_an_error() {
    for len in [0usize, 3, 5, 16] {
        let msg = Response::new(7, NAME, RecordKind::A)
            .answer(rr(NAME, 1, 1, vec![1; len]))
            .bytes();
        assert!(matches!(
            err(&msg, RecordKind::A),
            DnsError::BadRecord { rtype: 1, .. }
        ));
    }
    let msg = Response::new(7, NAME, RecordKind::Aaaa)
        .answer(rr(NAME, 28, 1, vec![1; 4]))
        .bytes();
    assert!(matches!(
        err(&msg, RecordKind::Aaaa),
        DnsError::BadRecord { rtype: 28, .. }
    ));
}

#[test]
fn the_additional_section_is_not_read() {
    let mut msg = Response::new(7, NAME, RecordKind::A)
        .answer(a(NAME, 3, v4(1)))
        .additional(a(NAME, 3, v4(2)))
        .bytes();
    // Cut the additional record short: nothing reads it.
    msg.truncate(msg.len() - 3);
    assert_eq!(
        ok(&msg, RecordKind::A).addresses,
        vec![(IpAddr::V4(v4(1)), 3)]
    );
}

// === parse: header and question ===

#[test]
fn another_id_is_refused() {
    let msg = Response::new(8, NAME, RecordKind::A).bytes();
    assert_eq!(
        err(&msg, RecordKind::A),
        DnsError::IdMismatch {
            expected: 7,
            got: 8
        }
    );
}

#[test]
fn a_query_or_another_opcode_is_not_a_response() {
    let q = query(7, NAME, RecordKind::A).unwrap();
    assert_eq!(err(&q, RecordKind::A), DnsError::NotAResponse);
    for opcode in 1u8..16 {
        let mut msg = Response::new(7, NAME, RecordKind::A).bytes();
        msg[2] |= opcode << 3;
        assert_eq!(err(&msg, RecordKind::A), DnsError::NotAResponse);
    }
}

#[test]
fn another_question_is_refused() {
    let other_name = Response::new(7, "other.test", RecordKind::A).bytes();
    assert_eq!(err(&other_name, RecordKind::A), DnsError::QuestionMismatch);
    let other_type = Response::new(7, NAME, RecordKind::Aaaa).bytes();
    assert_eq!(err(&other_type, RecordKind::A), DnsError::QuestionMismatch);
    let mut other_class = Response::new(7, NAME, RecordKind::A).bytes();
    let at = other_class.len() - 1;
    other_class[at] = 3;
    assert_eq!(err(&other_class, RecordKind::A), DnsError::QuestionMismatch);
    let mut two = Response::new(7, NAME, RecordKind::A).bytes();
    two[5] = 2;
    assert_eq!(err(&two, RecordKind::A), DnsError::QuestionMismatch);
}

#[test]
fn no_question_is_accepted_only_when_truncated_or_with_an_error_other_than_nxdomain() {
    let mut r = Response::new(7, NAME, RecordKind::A);
    r.question = false;
    for rcode in [
        Rcode::FormErr,
        Rcode::ServFail,
        Rcode::Refused,
        Rcode::Other(9),
    ] {
        let got = ok(&r.clone().rcode(rcode).bytes(), RecordKind::A);
        assert_eq!(got.rcode, rcode);
        assert!(got.addresses.is_empty());
    }
    for rcode in [Rcode::NoError, Rcode::NxDomain] {
        let msg = r.clone().rcode(rcode).bytes();
        assert_eq!(err(&msg, RecordKind::A), DnsError::QuestionMismatch);
        // Truncated, it just says "ask again over TCP".
        let got = ok(&r.clone().rcode(rcode).truncated().bytes(), RecordKind::A);
        assert!(got.truncated && got.addresses.is_empty());
    }
}

#[test]
fn error_rcodes_are_reported_not_failed() {
    for rcode in [Rcode::ServFail, Rcode::Refused, Rcode::NotImp] {
        let msg = Response::new(7, NAME, RecordKind::A).rcode(rcode).bytes();
        let got = ok(&msg, RecordKind::A);
        assert_eq!(got.rcode, rcode);
        assert!(got.addresses.is_empty());
    }
}

#[test]
fn a_truncated_response_gives_its_flag_and_no_records() {
    let full = Response::new(7, NAME, RecordKind::A)
        .truncated()
        .answer(a(NAME, 3, v4(1)))
        .answer(a(NAME, 3, v4(2)))
        .bytes();
    // Whatever of the records the server managed to fit is not read.
    let question_end = 12 + wire(NAME).len() + 4;
    for cut in question_end..=full.len() {
        let got = ok(&full[..cut], RecordKind::A);
        assert!(got.truncated);
        assert!(got.addresses.is_empty());
    }
}

// === parse: CNAME, negative answers ===

#[test]
fn a_cname_chain_is_followed_and_its_ttls_cap_the_answer() {
    let msg = Response::new(7, NAME, RecordKind::A)
        .answer(cname(NAME, 50, "mid.test"))
        .answer(cname("mid.test", 20, "end.test"))
        .answer(a("end.test", 30, v4(1)))
        .answer(a("end.test", 10, v4(2)))
        .answer(a("mid.test", 99, v4(9)))
        .bytes();
    assert_eq!(
        ok(&msg, RecordKind::A).addresses,
        vec![(IpAddr::V4(v4(1)), 20), (IpAddr::V4(v4(2)), 10)]
    );
}

#[test]
fn a_cname_chain_in_any_record_order_is_followed() {
    let msg = Response::new(7, NAME, RecordKind::A)
        .answer(a("end.test", 30, v4(1)))
        .answer(cname("mid.test", 20, "end.test"))
        .answer(cname(NAME, 50, "mid.test"))
        .bytes();
    assert_eq!(
        ok(&msg, RecordKind::A).addresses,
        vec![(IpAddr::V4(v4(1)), 20)]
    );
}

#[test]
fn a_cname_loop_gives_no_addresses() {
    let msg = Response::new(7, NAME, RecordKind::A)
        .answer(cname(NAME, 5, "x.test"))
        .answer(cname("x.test", 5, NAME))
        .answer(a("y.test", 5, v4(1)))
        .bytes();
    let got = ok(&msg, RecordKind::A);
    assert!(got.addresses.is_empty());
    assert_eq!(got.negative_ttl, None);
}

#[test]
fn a_cname_whose_target_overruns_its_data_is_an_error() {
    let mut bad = cname(NAME, 5, "x.test");
    bad.data.push(0);
    let msg = Response::new(7, NAME, RecordKind::A).answer(bad).bytes();
    assert!(matches!(
        err(&msg, RecordKind::A),
        DnsError::BadRecord { rtype: 5, .. }
    ));
}

#[test]
fn nxdomain_takes_the_lesser_of_soa_ttl_and_minimum() {
    for (ttl, minimum, want) in [(60, 5, 5), (3, 300, 3), (7, 7, 7)] {
        let msg = Response::new(7, NAME, RecordKind::A)
            .rcode(Rcode::NxDomain)
            .authority(soa("test", ttl, minimum))
            .bytes();
        let got = ok(&msg, RecordKind::A);
        assert_eq!(got.rcode, Rcode::NxDomain);
        assert!(got.addresses.is_empty());
        assert_eq!(got.negative_ttl, Some(want));
    }
}

#[test]
fn nodata_has_a_negative_ttl_only_with_an_soa_above_the_name() {
    let bare = Response::new(7, NAME, RecordKind::Aaaa).bytes();
    let got = ok(&bare, RecordKind::Aaaa);
    assert_eq!((got.rcode, got.negative_ttl), (Rcode::NoError, None));

    for (zone, want) in [
        (NAME, Some(4)),
        ("test.", Some(4)),
        (".", Some(4)),
        ("other.test", None),
        ("ma.test", None),
    ] {
        let msg = Response::new(7, NAME, RecordKind::Aaaa)
            .authority(rr("ns.test", 2, 1, wire("x")))
            .authority(soa(zone, 4, 9))
            .bytes();
        assert_eq!(ok(&msg, RecordKind::Aaaa).negative_ttl, want, "zone {zone}");
    }
}

#[test]
fn the_negative_ttl_after_a_cname_is_capped_by_the_chain() {
    let msg = Response::new(7, NAME, RecordKind::A)
        .rcode(Rcode::NxDomain)
        .answer(cname(NAME, 2, "gone.other"))
        .authority(soa("test", 60, 60))
        .authority(soa("other", 60, 30))
        .bytes();
    // The SOA of the chain's end, capped by the CNAME's TTL.
    assert_eq!(ok(&msg, RecordKind::A).negative_ttl, Some(2));
}

#[test]
fn a_malformed_soa_is_an_error() {
    let mut short = soa("test", 5, 5);
    short.data.pop();
    let mut long = soa("test", 5, 5);
    long.data.push(0);
    for bad in [short, long] {
        let msg = Response::new(7, NAME, RecordKind::A)
            .rcode(Rcode::NxDomain)
            .authority(bad)
            .bytes();
        assert!(matches!(
            err(&msg, RecordKind::A),
            DnsError::BadRecord { rtype: 6, .. } | DnsError::Short(_)
        ));
    }
}

// === compression ===

#[test]
fn owners_compressed_to_the_question_are_read() {
    let msg = Response::new(7, NAME, RecordKind::A)
        .compressed()
        .answer(a(NAME, 3, v4(1)))
        .answer(a(NAME, 4, v4(2)))
        .bytes();
    assert_eq!(msg[12 + wire(NAME).len() + 4], 0xc0);
    assert_eq!(ok(&msg, RecordKind::A).addresses.len(), 2);
}

/// The length of [`compressed_chain`]'s final SOA record.
const SOA_BYTES: usize = 12 + 7 + 20;

/// A response whose question is `llama.test` and whose records use
/// pointers into the question and into each other.
fn compressed_chain() -> Vec<u8> {
    let mut m = vec![0, 7, 0x81, 0x80, 0, 1, 0, 2, 0, 1, 0, 0];
    m.extend(b"\x05llama\x04test\x00\x00\x01\x00\x01"); // question at 12
                                                        // CNAME llama.test -> pod.llama.test (a label, then a pointer to 12).
    m.extend([0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 9, 0, 6]);
    let target = m.len();
    m.extend(b"\x03pod\xc0\x0c");
    // A pod.llama.test (a pointer to the CNAME's target).
    m.extend([
        0xc0,
        target as u8,
        0,
        1,
        0,
        1,
        0,
        0,
        0,
        8,
        0,
        4,
        10,
        0,
        0,
        1,
    ]);
    // SOA test. with mname "ns" + pointer to "test." and rname pointer to 12.
    m.extend([0xc0, 18, 0, 6, 0, 1, 0, 0, 0, 5, 0, 27]);
    m.extend(b"\x02ns\xc0\x12\xc0\x0c");
    for n in [1u32, 2, 3, 4, 5] {
        m.extend(n.to_be_bytes());
    }
    m
}

#[test]
fn pointers_in_owners_and_cname_targets_are_followed() {
    let got = ok(&compressed_chain(), RecordKind::A);
    assert_eq!(got.addresses, vec![(IpAddr::V4(v4(1)), 8)]);
}

#[test]
fn pointers_in_soa_names_are_followed() {
    let mut m = compressed_chain();
    m[7] = 1; // keep only the CNAME: no addresses, so the SOA is read
    let soa_at = m.len() - SOA_BYTES;
    let soa = m[soa_at..].to_vec();
    m.truncate(soa_at - 16);
    m.extend(soa);
    let got = ok(&m, RecordKind::A);
    assert!(got.addresses.is_empty());
    assert_eq!(got.negative_ttl, Some(5));
}

/// Header and a question whose name is `name_bytes` (raw), type A, class IN.
fn with_question(name_bytes: &[u8]) -> Vec<u8> {
    let mut m = vec![0, 7, 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0];
    m.extend(name_bytes);
    m.extend([0, 1, 0, 1]);
    m
}

#[test]
fn a_pointer_to_itself_or_forwards_is_refused() {
    for name in [&[0xc0, 12][..], &[0xc0, 14, 0], &[0xc0, 200], &[0xff, 0xff]] {
        assert_eq!(
            err(&with_question(name), RecordKind::A),
            DnsError::BadPointer(12),
            "{name:?}"
        );
    }
}

#[test]
fn a_pointer_loop_is_refused() {
    // An owner "a" + pointer back to its own start: a loop through a
    // backward pointer.
    let mut m = Response::new(7, NAME, RecordKind::A).bytes();
    m[7] = 1;
    let owner = m.len();
    m.extend(b"\x01a");
    m.extend([0xc0, owner as u8]);
    m.extend([0, 1, 0, 1, 0, 0, 0, 1, 0, 4, 1, 2, 3, 4]);
    assert_eq!(err(&m, RecordKind::A), DnsError::BadPointer(owner + 2));

    // Two names pointing into each other.
    let mut m = Response::new(7, NAME, RecordKind::A).bytes();
    m[7] = 2;
    let first = m.len();
    m.extend([1, b'a', 0xc0, (first + 16) as u8]); // points forward: refused
    m.extend([0, 1, 0, 1, 0, 0, 0, 1, 0, 0]);
    m.extend([1, b'b', 0xc0, first as u8]);
    m.extend([0, 1, 0, 1, 0, 0, 0, 1, 0, 0]);
    assert_eq!(err(&m, RecordKind::A), DnsError::BadPointer(first + 2));
}

#[test]
fn reserved_label_types_are_refused() {
    for first in [0x40u8, 0x41, 0x80, 0xbf] {
        assert_eq!(
            err(&with_question(&[first, 0]), RecordKind::A),
            DnsError::BadName(12)
        );
    }
}

#[test]
fn a_name_longer_than_255_bytes_is_refused_even_through_pointers() {
    // Four 63-byte labels in place: 256 bytes with the root.
    let mut long = Vec::new();
    for _ in 0..4 {
        long.push(63);
        long.extend([b'a'; 63]);
    }
    long.push(0);
    assert_eq!(
        err(&with_question(&long), RecordKind::A),
        DnsError::BadName(12)
    );

    // 3 x 63 in the question (193 bytes with the root), then an owner of
    // a 62-byte label + a pointer to it: 256.
    let mut q = Vec::new();
    for _ in 0..3 {
        q.push(63);
        q.extend([b'a'; 63]);
    }
    q.push(0);
    let mut m = with_question(&q);
    m[7] = 1;
    let owner = m.len();
    m.push(62);
    m.extend([b'b'; 62]);
    m.extend([0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4, 1, 2, 3, 4]);
    let asked = vec!["a".repeat(63); 3].join(".");
    assert_eq!(
        parse(&m, 7, &asked, RecordKind::A).unwrap_err(),
        DnsError::BadName(owner)
    );
    // 255 bytes exactly is fine: drop one byte of the owner's label.
    let mut m = with_question(&q);
    m[7] = 1;
    m.push(61);
    m.extend([b'b'; 61]);
    m.extend([0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4, 1, 2, 3, 4]);
    assert!(parse(&m, 7, &asked, RecordKind::A)
        .unwrap()
        .addresses
        .is_empty());
}

// === cut at every byte ===

#[test]
fn every_cut_of_a_response_with_addresses_is_an_error() {
    for full in [
        Response::new(7, NAME, RecordKind::A)
            .answer(cname(NAME, 9, "end.test"))
            .answer(a("end.test", 3, v4(1)))
            .answer(a("end.test", 3, v4(2)))
            .bytes(),
        compressed_chain()[..compressed_chain().len() - SOA_BYTES].to_vec(),
    ] {
        let mut whole = full.clone();
        whole[9] = 0; // no authority section (the chain's SOA is cut off)
        assert!(!ok(&whole, RecordKind::A).addresses.is_empty());
        for cut in 0..whole.len() {
            let e = err(&whole[..cut], RecordKind::A);
            assert!(matches!(e, DnsError::Short(_)), "cut {cut}: {e:?}");
        }
    }
}

#[test]
fn every_cut_of_a_negative_response_is_an_error() {
    let whole = Response::new(7, NAME, RecordKind::A)
        .rcode(Rcode::NxDomain)
        .authority(soa("test", 5, 5))
        .bytes();
    assert_eq!(ok(&whole, RecordKind::A).negative_ttl, Some(5));
    for cut in 0..whole.len() {
        assert!(
            parse(&whole[..cut], 7, NAME, RecordKind::A).is_err(),
            "cut {cut}"
        );
    }
}

#[test]
fn every_error_displays_on_one_line() {
    let errors = [
        query(1, "a..b", RecordKind::A).unwrap_err(),
        DnsError::Short(3),
        DnsError::IdMismatch {
            expected: 1,
            got: 2,
        },
        DnsError::NotAResponse,
        DnsError::QuestionMismatch,
        DnsError::BadPointer(12),
        DnsError::BadName(12),
        DnsError::BadRecord { rtype: 1, at: 40 },
    ];
    for e in errors {
        let line = e.to_string();
        assert!(!line.is_empty() && !line.contains('\n'), "{line:?}");
    }
}
