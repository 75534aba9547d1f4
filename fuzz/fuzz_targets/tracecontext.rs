//! Fuzzes W3C trace context: `TraceParent::parse` and `valid_tracestate` on
//! the raw input, and `format_traceparent` on ids taken from its first 25
//! bytes.
//!
//! Invariants:
//! - never panics;
//! - a parsed `traceparent` has non-zero ids, and formatting it as version 00
//!   parses back to the same ids and flags; for version 00 the formatted
//!   value is the input less its optional whitespace (OWS);
//! - any non-zero ids and flags survive `format_traceparent` then `parse`;
//! - a valid `tracestate` is at most `MAX_HEADER_BYTES` long and stays valid
//!   with OWS around it (when that still fits).
#![no_main]

use libfuzzer_sys::fuzz_target;
use llamatap_wire::tracecontext::{format_traceparent, valid_tracestate, TraceParent, MAX_HEADER_BYTES};

fn trim_ows(mut b: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = b {
        b = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = b {
        b = rest;
    }
    b
}

fuzz_target!(|data: &[u8]| {
    if let Some(tp) = TraceParent::parse(data) {
        assert_ne!(tp.trace_id, [0; 16], "all-zero trace id accepted");
        assert_ne!(tp.parent_id, [0; 8], "all-zero parent id accepted");
        assert_ne!(tp.version, 0xff, "version ff accepted");
        let formatted = format_traceparent(tp.trace_id, tp.parent_id, tp.flags);
        assert_eq!(formatted.len(), 55);
        let back = TraceParent::parse(formatted.as_bytes());
        assert_eq!(back, Some(TraceParent { version: 0, ..tp }), "round trip");
        if tp.version == 0 {
            assert_eq!(formatted.as_bytes(), trim_ows(data), "00 is not canonical");
        }
    }

    if let Some((ids, _)) = data.split_first_chunk::<25>() {
        let trace_id: [u8; 16] = ids[..16].try_into().unwrap_or_default();
        let span_id: [u8; 8] = ids[16..24].try_into().unwrap_or_default();
        let flags = ids[24];
        let formatted = format_traceparent(trace_id, span_id, flags);
        let parsed = TraceParent::parse(formatted.as_bytes());
        if trace_id == [0; 16] || span_id == [0; 8] {
            assert_eq!(parsed, None, "zero id accepted");
        } else {
            let want = TraceParent {
                version: 0,
                trace_id,
                parent_id: span_id,
                flags,
            };
            assert_eq!(parsed, Some(want), "format then parse");
        }
    }

    if valid_tracestate(data) {
        assert!(data.len() <= MAX_HEADER_BYTES);
        if data.len() + 2 <= MAX_HEADER_BYTES {
            let mut padded = vec![b' '];
            padded.extend_from_slice(data);
            padded.push(b'\t');
            assert!(valid_tracestate(&padded), "OWS made a tracestate invalid");
        }
    }
});
