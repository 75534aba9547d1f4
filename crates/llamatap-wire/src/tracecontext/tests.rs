//! Tests of Trace Context parsing, in the style of the W3C test suite
//! (`test/test.py`), plus round trips and property tests on arbitrary bytes.

use super::*;
use proptest::prelude::*;

const VALID: &str = "00-12345678901234567890123456789012-1234567890123456-01";
const TRACE_ID: [u8; 16] = [
    0x12, 0x34, 0x56, 0x78, 0x90, 0x12, 0x34, 0x56, 0x78, 0x90, 0x12, 0x34, 0x56, 0x78, 0x90, 0x12,
];
const PARENT_ID: [u8; 8] = [0x12, 0x34, 0x56, 0x78, 0x90, 0x12, 0x34, 0x56];

fn parse(header: &str) -> Option<TraceParent> {
    TraceParent::parse(header.as_bytes())
}

#[test]
fn parses_a_valid_header() {
    let want = TraceParent {
        version: 0,
        trace_id: TRACE_ID,
        parent_id: PARENT_ID,
        flags: 1,
    };
    assert_eq!(parse(VALID), Some(want));
    assert!(want.sampled());
    let sampled = |flags: &str| parse(&VALID.replace("-01", flags)).map(|p| p.sampled());
    assert_eq!(sampled("-00"), Some(false));
    assert_eq!(sampled("-02"), Some(false));
    assert_eq!(sampled("-03"), Some(true));
    assert_eq!(
        parse(&VALID.replace("-01", "-ff")).map(|p| p.flags),
        Some(0xff)
    );
}

#[test]
fn rejects_what_the_w3c_suite_rejects() {
    let invalid = [
        // version 00 with trailing data
        "00-12345678901234567890123456789012-1234567890123456-01.",
        "00-12345678901234567890123456789012-1234567890123456-01-what-the-future-will-be-like",
        // version ff, illegal or wrong-length versions
        "ff-12345678901234567890123456789012-1234567890123456-01",
        ".0-12345678901234567890123456789012-1234567890123456-01",
        "0.-12345678901234567890123456789012-1234567890123456-01",
        "000-12345678901234567890123456789012-1234567890123456-01",
        "0000-12345678901234567890123456789012-1234567890123456-01",
        "0-12345678901234567890123456789012-1234567890123456-01",
        // trace id: all zero, illegal characters, too long, too short
        "00-00000000000000000000000000000000-1234567890123456-01",
        "00-.2345678901234567890123456789012-1234567890123456-01",
        "00-1234567890123456789012345678901.-1234567890123456-01",
        "00-123456789012345678901234567890123-1234567890123456-01",
        "00-1234567890123456789012345678901-1234567890123456-01",
        // parent id: all zero, illegal characters, too long, too short
        "00-12345678901234567890123456789012-0000000000000000-01",
        "00-12345678901234567890123456789012-.234567890123456-01",
        "00-12345678901234567890123456789012-123456789012345.-01",
        "00-12345678901234567890123456789012-12345678901234567-01",
        "00-12345678901234567890123456789012-123456789012345-01",
        // flags: illegal characters, too long, too short
        "00-12345678901234567890123456789012-1234567890123456-.0",
        "00-12345678901234567890123456789012-1234567890123456-0.",
        "00-12345678901234567890123456789012-1234567890123456-001",
        "00-12345678901234567890123456789012-1234567890123456-1",
        // future version whose flags are followed by something other than `-`
        "cc-12345678901234567890123456789012-1234567890123456-01.what-the-future-will-be-like",
        // uppercase hex anywhere
        "0A-12345678901234567890123456789012-1234567890123456-01",
        "00-ABCDEF78901234567890123456789012-1234567890123456-01",
        "00-12345678901234567890123456789012-ABCDEF7890123456-01",
        "00-12345678901234567890123456789012-1234567890123456-0A",
        // wrong separators, empty, inner whitespace, non-OWS whitespace
        "00_12345678901234567890123456789012-1234567890123456-01",
        "00-12345678901234567890123456789012_1234567890123456-01",
        "00-12345678901234567890123456789012-1234567890123456_01",
        "",
        "00",
        "00-12345678901234567890123456789012 -1234567890123456-01",
        "\n00-12345678901234567890123456789012-1234567890123456-01",
        "00-12345678901234567890123456789012-1234567890123456-01\r",
    ];
    for header in invalid {
        assert_eq!(parse(header), None, "{header:?}");
    }
}

#[test]
fn reads_future_versions_for_their_first_four_fields() {
    for header in [
        "cc-12345678901234567890123456789012-1234567890123456-01",
        "cc-12345678901234567890123456789012-1234567890123456-01-what-the-future-will-be-like",
        "01-12345678901234567890123456789012-1234567890123456-01-",
        "fe-12345678901234567890123456789012-1234567890123456-03-xx",
    ] {
        let ids = parse(header).map(|p| (p.trace_id, p.parent_id, p.sampled()));
        assert_eq!(ids, Some((TRACE_ID, PARENT_ID, true)), "{header}");
    }
    let version = parse(&VALID.replacen("00", "cc", 1)).map(|p| p.version);
    assert_eq!(version, Some(0xcc));
}

#[test]
fn ignores_optional_whitespace_around_the_value() {
    for header in [
        format!(" {VALID}"),
        format!("\t{VALID}"),
        format!("{VALID} "),
        format!("{VALID}\t"),
        format!("\t {VALID} \t"),
    ] {
        assert_eq!(
            parse(&header).map(|p| p.trace_id),
            Some(TRACE_ID),
            "{header:?}"
        );
    }
}

#[test]
fn rejects_oversized_headers_unread() {
    let padded = format!("{VALID}{}", " ".repeat(MAX_HEADER_BYTES - VALID.len()));
    assert!(parse(&padded).is_some());
    assert_eq!(parse(&format!("{padded} ")), None);
    let future = format!("cc{}-{}", &VALID[2..], "x".repeat(MAX_HEADER_BYTES));
    assert_eq!(parse(&future), None);
}

#[test]
fn formats_lowercase_version_00() {
    let out = format_traceparent(TRACE_ID, PARENT_ID, 1);
    assert_eq!(out, VALID);
    assert_eq!(
        format_traceparent([0xab; 16], [0xcd; 8], 0x0f),
        "00-abababababababababababababababab-cdcdcdcdcdcdcdcd-0f"
    );
}

// === tracestate ===

#[test]
fn accepts_valid_tracestate() {
    let key = "abcdefghijklmnopqrstuvwxyz0123456789_-*/";
    let value: String = (0x20u8..=0x7e)
        .filter(|&b| b != b',' && b != b'=')
        .map(char::from)
        .collect();
    let all_chars = format!("{key}={value}");
    let vendor = format!("{key}@a-z0-9_-*/={value}");
    let members: Vec<String> = (1..=32).map(|i| format!("bar{i:02}={i:02}")).collect();
    let long_key = format!("{}=1", "z".repeat(256));
    let long_tenant = format!("{}@{}=1", "t".repeat(241), "v".repeat(14));
    for header in [
        "foo=1",
        "foo=1,bar=2",
        "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
        "foo=1 \t , \t bar=2, \t baz=3",
        "\t foo=1 \t",
        "foo=1,,bar=2",
        "0tenant@vendor=x",
        "foo= leading space",
        all_chars.as_str(),
        vendor.as_str(),
        &members.join(","),
        long_key.as_str(),
        long_tenant.as_str(),
    ] {
        assert!(valid_tracestate(header.as_bytes()), "{header:?}");
    }
}

#[test]
fn rejects_invalid_tracestate() {
    let members: Vec<String> = (1..=33).map(|i| format!("bar{i:02}={i:02}")).collect();
    let long_key = format!("{}=1", "z".repeat(257));
    let long_tenant = format!("{}@v=1", "t".repeat(242));
    let long_vendor = format!("t@{}=1", "v".repeat(15));
    let long_value = format!("foo={}", "v".repeat(257));
    let too_long = format!("foo={},bar=1", "v".repeat(MAX_HEADER_BYTES));
    for header in [
        "",
        " ",
        ",",
        " , ,", // nothing to forward
        "foo=1,foo=1",
        "foo=1,foo=2", // duplicate keys
        "foo =1",
        "FOO=1",
        "foo.bar=1",
        "1foo=1", // illegal keys
        "foo@=1,bar=2",
        "@foo=1,bar=2",
        "foo@@bar=1,bar=2",
        "foo@bar@baz=1,bar=2",
        "foo@1bar=1", // system id must start with a letter
        "foo=bar=baz",
        "foo=,bar=3",
        "foo",
        "=1", // illegal values or members
        "foo=a\u{7f}",
        "foo=é",
        "foo=a\tb",
        &members.join(","),
        long_key.as_str(),
        long_tenant.as_str(),
        long_vendor.as_str(),
        long_value.as_str(),
        too_long.as_str(),
    ] {
        assert!(!valid_tracestate(header.as_bytes()), "{header:?}");
    }
}

// === properties ===

proptest! {
    #[test]
    fn never_panics_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let _ = TraceParent::parse(&bytes);
        let _ = valid_tracestate(&bytes);
    }

    #[test]
    fn never_panics_near_valid_headers(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        version in any::<u8>(),
    ) {
        let mut bytes = format!("{version:02x}{}-tail", &VALID[2..]).into_bytes();
        for (at, byte) in &edits {
            let at = at.index(bytes.len());
            bytes[at] = *byte;
        }
        if let Some(parent) = TraceParent::parse(&bytes) {
            prop_assert_ne!(parent.version, 0xff);
            prop_assert_ne!(parent.trace_id, [0; 16]);
            prop_assert_ne!(parent.parent_id, [0; 8]);
        }
    }

    #[test]
    fn format_then_parse_round_trips(
        trace_id in any::<[u8; 16]>(),
        span_id in any::<[u8; 8]>(),
        flags in any::<u8>(),
    ) {
        let header = format_traceparent(trace_id, span_id, flags);
        prop_assert_eq!(header.len(), 55);
        prop_assert_eq!(header.to_lowercase(), header.clone());
        let parsed = TraceParent::parse(header.as_bytes());
        if trace_id == [0; 16] || span_id == [0; 8] {
            prop_assert_eq!(parsed, None);
        } else {
            let want = TraceParent { version: 0, trace_id, parent_id: span_id, flags };
            prop_assert_eq!(parsed, Some(want));
        }
    }

    #[test]
    fn generated_tracestate_members_are_valid(
        keys in prop::collection::btree_set("[a-z][a-z0-9_*/-]{0,20}", 1..=32),
        value in "[!-+\\--<>-~]{1,10}",
    ) {
        let header: Vec<String> = keys.iter().map(|key| format!("{key}={value}")).collect();
        let header = header.join(",");
        prop_assert_eq!(valid_tracestate(header.as_bytes()), header.len() <= MAX_HEADER_BYTES);
    }
}
