//! W3C Trace Context: parses incoming `traceparent`, checks `tracestate`, and
//! formats outgoing `traceparent` / `traceresponse` values.
//!
//! Follows Trace Context Level 1 and Level 2 (the `traceresponse` header uses
//! the `traceparent` format). It works on header bytes and never panics or
//! allocates while parsing. It does not generate ids, keep spans, merge
//! several `tracestate` headers (join them with `,` first, as HTTP allows) or
//! edit `tracestate` members: llamatap forwards a valid one unchanged.
//!
//! Decisions:
//! - Leading and trailing optional whitespace (space, tab) is ignored, as the
//!   W3C test suite's `test_traceparent_ows_handling` requires; HTTP parsers
//!   strip it anyway.
//! - Every hex digit, flags included, must be lowercase (`HEXDIGLC` in the
//!   grammar); `00-…-0A` is invalid.
//! - Version `00` must be exactly 55 bytes. A higher version (`01`–`fe`) is
//!   read for its first four fields when it has at least 55 bytes and
//!   anything after the flags starts with `-`.
//! - Headers over [`MAX_HEADER_BYTES`] are rejected before any parsing.
//! - A `tracestate` is worth forwarding only if it has 1 to 32 members, valid
//!   keys and values, no duplicate key and at most 512 bytes; empty members
//!   (`a=1,,b=2`) are allowed by the grammar and not counted.

#[cfg(test)]
mod tests;

/// Longest `traceparent` or `tracestate` value read, in bytes.
///
/// A version-00 `traceparent` has 55 bytes and the spec caps `tracestate` at
/// 512, so anything longer is junk or an attack and is rejected unread.
pub const MAX_HEADER_BYTES: usize = 512;

/// Trace flag: the caller may have recorded the trace.
pub const FLAG_SAMPLED: u8 = 0x01;

/// Trace flag (Level 2): the trace id's right 7 bytes are random.
pub const FLAG_RANDOM: u8 = 0x02;

/// Most list members in a `tracestate`.
const MAX_MEMBERS: usize = 32;

/// A parsed `traceparent` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceParent {
    /// Format version: 0, or a higher version read as version 0.
    pub version: u8,
    /// The trace id, never all zero.
    pub trace_id: [u8; 16],
    /// The caller's span id, never all zero.
    pub parent_id: [u8; 8],
    /// Trace flags as sent, unknown bits included ([`FLAG_SAMPLED`], [`FLAG_RANDOM`]).
    pub flags: u8,
}

impl TraceParent {
    /// Parses a `traceparent` header value; `None` if it is invalid, in which
    /// case the caller starts a new trace (never fails the request).
    pub fn parse(header: &[u8]) -> Option<Self> {
        if header.len() > MAX_HEADER_BYTES {
            return None;
        }
        let h = trim_ows(header);
        if h.len() < 55 || h[2] != b'-' || h[35] != b'-' || h[52] != b'-' {
            return None;
        }
        let version = hex_byte(h[0], h[1])?;
        let trailing_ok = match version {
            0xff => false,
            0 => h.len() == 55,
            _ => h.len() == 55 || h[55] == b'-',
        };
        if !trailing_ok {
            return None;
        }
        let trace_id: [u8; 16] = hex_array(&h[3..35])?;
        let parent_id: [u8; 8] = hex_array(&h[36..52])?;
        let flags = hex_byte(h[53], h[54])?;
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(Self {
            version,
            trace_id,
            parent_id,
            flags,
        })
    }

    /// Whether the caller set the sampled flag.
    pub fn sampled(&self) -> bool {
        self.flags & FLAG_SAMPLED != 0
    }
}

/// Formats a version-00 `traceparent` (or `traceresponse`) value:
/// `00-<32 hex>-<16 hex>-<2 hex>`, lowercase.
pub fn format_traceparent(trace_id: [u8; 16], span_id: [u8; 8], flags: u8) -> String {
    let mut out = String::with_capacity(55);
    out.push_str("00-");
    push_hex(&mut out, &trace_id);
    out.push('-');
    push_hex(&mut out, &span_id);
    out.push('-');
    push_hex(&mut out, &[flags]);
    out
}

/// Whether a `tracestate` header value is valid and worth forwarding; the
/// caller drops an invalid one (and an empty one, which the spec says
/// vendors should avoid sending).
pub fn valid_tracestate(header: &[u8]) -> bool {
    if header.len() > MAX_HEADER_BYTES {
        return false;
    }
    let mut keys: [&[u8]; MAX_MEMBERS] = [&[]; MAX_MEMBERS];
    let mut count = 0;
    for member in header.split(|&b| b == b',') {
        let member = trim_ows(member);
        if member.is_empty() {
            continue;
        }
        let Some(eq) = member.iter().position(|&b| b == b'=') else {
            return false;
        };
        let (key, value) = (&member[..eq], &member[eq + 1..]);
        if count == MAX_MEMBERS || !valid_key(key) || !valid_value(value) {
            return false;
        }
        if keys[..count].contains(&key) {
            return false;
        }
        keys[count] = key;
        count += 1;
    }
    count > 0
}

// === grammar ===

/// `simple-key = lcalpha 0*255(keychar)` or
/// `tenant-id "@" system-id` with `tenant-id = (lcalpha / DIGIT) 0*240(keychar)`
/// and `system-id = lcalpha 0*13(keychar)`.
fn valid_key(key: &[u8]) -> bool {
    match key.iter().position(|&b| b == b'@') {
        None => valid_key_part(key, 256, false),
        Some(at) => {
            valid_key_part(&key[..at], 241, true) && valid_key_part(&key[at + 1..], 14, false)
        }
    }
}

/// 1 to `max` bytes of `keychar`, the first a lowercase letter (or a digit
/// when `digit_first`).
fn valid_key_part(part: &[u8], max: usize, digit_first: bool) -> bool {
    let Some((&first, rest)) = part.split_first() else {
        return false;
    };
    part.len() <= max
        && (first.is_ascii_lowercase() || (digit_first && first.is_ascii_digit()))
        && rest.iter().all(|&b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-' | b'*' | b'/')
        })
}

/// `value = 0*255(chr) nblk-chr`: printable ASCII but `,` and `=`, not
/// ending in a space.
fn valid_value(value: &[u8]) -> bool {
    let Some(&last) = value.last() else {
        return false;
    };
    value.len() <= 256
        && last != b' '
        && value
            .iter()
            .all(|&b| matches!(b, 0x20..=0x7e) && b != b',' && b != b'=')
}

/// Strips optional whitespace (space, tab) from both ends.
fn trim_ows(bytes: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| matches!(b, b' ' | b'\t');
    let start = bytes.iter().position(|b| !is_ows(b)).unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !is_ows(b))
        .map_or(start, |at| at + 1);
    &bytes[start..end]
}

/// A lowercase hex digit's value.
fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}

fn hex_byte(high: u8, low: u8) -> Option<u8> {
    Some(hex_digit(high)? << 4 | hex_digit(low)?)
}

/// Decodes `2 * N` lowercase hex digits.
fn hex_array<const N: usize>(hex: &[u8]) -> Option<[u8; N]> {
    if hex.len() != 2 * N {
        return None;
    }
    let mut out = [0; N];
    for (byte, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
        *byte = hex_byte(pair[0], pair[1])?;
    }
    Some(out)
}

fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
}
