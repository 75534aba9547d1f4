//! A request path as llama-server's HTTP library (cpp-httplib 0.59, vendored
//! in the pinned llama.cpp) reads it before it picks a handler, so that
//! llamatap classifies a request by the handler that will run, not by its
//! spelling.
//!
//! cpp-httplib (`Server::parse_request_line`) drops the target from the
//! first `#`, cuts it at the first `?`, and percent-decodes the rest
//! (`decode_path_component`): `%XX` (either case of hex digit) becomes that
//! byte, `%uXXXX` becomes the code point in UTF-8 (a surrogate, `D800` to
//! `DFFF`, becomes nothing), and a `%` not followed by valid hex stays as it
//! is. Handlers are then matched against the decoded bytes exactly: no case
//! folding, no removal of dot segments or doubled slashes. So
//! `/v1/chat/%63ompletions` runs the chat handler, while
//! `/v1/chat/completions/` and `/V1/CHAT/COMPLETIONS` run none.
//!
//! Deliberately not here: which handler a decoded path names (the route
//! table in [`super`]), and any change to what is forwarded: llamatap sends
//! the path upstream as the client wrote it.

use std::borrow::Cow;

/// The path part of a request target (before any `?` or `#`), decoded as
/// cpp-httplib decodes it. Borrowed when there is nothing to decode.
pub fn decoded(target: &[u8]) -> Cow<'_, [u8]> {
    let end = memchr::memchr2(b'?', b'#', target).unwrap_or(target.len());
    let path = &target[..end];
    if memchr::memchr(b'%', path).is_none() {
        return Cow::Borrowed(path);
    }
    let mut out = Vec::with_capacity(path.len());
    let mut i = 0;
    while let Some(&b) = path.get(i) {
        i += 1;
        if b != b'%' || i >= path.len() {
            out.push(b);
            continue;
        }
        if path.get(i) == Some(&b'u') {
            match hex(path, i + 1, 4) {
                Some(code) => {
                    push_utf8(&mut out, code);
                    i += 5;
                }
                None => out.push(b),
            }
        } else {
            match hex(path, i, 2) {
                Some(byte) => {
                    // Two hex digits: at most 0xFF.
                    out.push(u8::try_from(byte).unwrap_or(u8::MAX));
                    i += 2;
                }
                None => out.push(b),
            }
        }
    }
    Cow::Owned(out)
}

/// The value of `count` hex digits at `at`, if all are there.
fn hex(s: &[u8], at: usize, count: usize) -> Option<u32> {
    let digits = s.get(at..at + count)?;
    digits.iter().try_fold(0u32, |value, &d| {
        let v = char::from(d).to_digit(16)?;
        Some(value * 16 + v)
    })
}

/// A `%uXXXX` code point in UTF-8; a surrogate adds nothing, as in
/// cpp-httplib's `to_utf8`.
fn push_utf8(out: &mut Vec<u8>, code: u32) {
    if let Some(c) = char::from_u32(code) {
        let mut buf = [0u8; 4];
        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
    }
}
