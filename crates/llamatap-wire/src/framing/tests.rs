#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Framing rules, and the chunked decoder on whole bodies, at every cut and
//! on malformed input.

mod proptests;

use super::*;

/// What decoding a body gave: its data, whether it ended, and the bytes
/// after its end.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Decoded {
    pub data: Vec<u8>,
    pub ended: bool,
    pub after: Vec<u8>,
}

/// Feeds `pieces` one after another, as reads would bring them, keeping
/// undecoded bytes as a caller's buffer does.
pub(super) fn decode_pieces<'a>(
    pieces: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Decoded, ChunkError> {
    let mut d = Chunked::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut out = Decoded {
        data: Vec::new(),
        ended: false,
        after: Vec::new(),
    };
    for piece in pieces {
        if out.ended {
            out.after.extend_from_slice(piece);
            continue;
        }
        buf.extend_from_slice(piece);
        loop {
            match d.decode(&buf)? {
                Step::Data { start, end } => {
                    assert!(start < end, "empty data range");
                    out.data.extend_from_slice(&buf[start..end]);
                    buf.drain(..end);
                }
                Step::More => {
                    buf.clear();
                    break;
                }
                Step::End { end } => {
                    out.ended = true;
                    assert!(d.is_done());
                    out.after.extend_from_slice(&buf[end..]);
                    buf.clear();
                    break;
                }
            }
        }
    }
    Ok(out)
}

/// The result for `body` cut at every one and every two positions must be
/// the result for it whole.
pub(super) fn same_at_every_cut(body: &[u8]) -> Result<Decoded, ChunkError> {
    let whole = decode_pieces([body]);
    for i in 0..=body.len() {
        assert_eq!(decode_pieces([&body[..i], &body[i..]]), whole, "cut at {i}");
        for j in i..=body.len() {
            assert_eq!(
                decode_pieces([&body[..i], &body[i..j], &body[j..]]),
                whole,
                "cuts at {i}, {j}"
            );
        }
    }
    let bytes: Vec<&[u8]> = body.chunks(1).collect();
    assert_eq!(decode_pieces(bytes), whole, "byte by byte");
    whole
}

fn ok(data: &[u8], after: &[u8]) -> Result<Decoded, ChunkError> {
    Ok(Decoded {
        data: data.to_vec(),
        ended: true,
        after: after.to_vec(),
    })
}

#[test]
fn sse_events_as_llama_server_sends_them() {
    let body = b"18\r\ndata: {\"content\":\"Hi\"}\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n";
    assert_eq!(
        same_at_every_cut(body),
        ok(b"data: {\"content\":\"Hi\"}\n\ndata: [DONE]\n\n", b"")
    );
}

#[test]
fn hex_sizes_of_any_case_extensions_spaces_and_trailers() {
    let body = b"A;name=value;x\r\n0123456789\r\na \t;ext\r\nabcdefghij\r\n0;end\r\nX-Trailer: 1\r\nY: 2\r\n\r\n";
    assert_eq!(same_at_every_cut(body), ok(b"0123456789abcdefghij", b""));
}

#[test]
fn bare_lf_line_ends_are_accepted() {
    assert_eq!(same_at_every_cut(b"3\nabc\n0\n\n"), ok(b"abc", b""));
    assert_eq!(
        same_at_every_cut(b"3\r\nabc\n0\nT: 1\n\r\n"),
        ok(b"abc", b"")
    );
}

#[test]
fn bytes_after_the_end_are_not_body() {
    assert_eq!(
        same_at_every_cut(b"2\r\nab\r\n0\r\n\r\nHTTP/1.1 200"),
        ok(b"ab", b"HTTP/1.1 200")
    );
}

#[test]
fn an_empty_body_is_just_the_last_chunk() {
    assert_eq!(same_at_every_cut(b"0\r\n\r\n"), ok(b"", b""));
    assert_eq!(same_at_every_cut(b"000\r\n\r\n"), ok(b"", b""));
}

#[test]
fn an_unfinished_body_has_not_ended() {
    let d = same_at_every_cut(b"5\r\nhello\r\n").unwrap();
    assert_eq!(d.data, b"hello");
    assert!(!d.ended);
    let d = same_at_every_cut(b"5\r\nhel").unwrap();
    assert_eq!(d.data, b"hel");
    assert!(!d.ended);
    let d = same_at_every_cut(b"0\r\nTrailer: x\r\n").unwrap();
    assert!(!d.ended);
}

#[test]
fn a_large_chunk_is_handed_out_as_it_arrives() {
    let mut body = b"10000\r\n".to_vec();
    body.extend((0..0x10000u32).map(|i| (i % 251) as u8));
    body.extend_from_slice(b"\r\n0\r\n\r\n");
    let pieces: Vec<&[u8]> = body.chunks(4096).collect();
    let d = decode_pieces(pieces).unwrap();
    assert!(d.ended);
    assert_eq!(d.data.len(), 0x10000);
    assert_eq!(d.data, body[7..7 + 0x10000]);
}

#[test]
fn data_is_returned_without_framing_and_then_more_is_asked_for() {
    let mut d = Chunked::new();
    let input = b"4\r\nabcd";
    assert_eq!(d.decode(input), Ok(Step::Data { start: 3, end: 7 }));
    assert_eq!(d.decode(b""), Ok(Step::More));
    assert_eq!(d.decode(b"\r\n"), Ok(Step::More));
    assert_eq!(d.decode(b"0\r\n\r\nrest"), Ok(Step::End { end: 5 }));
    assert_eq!(d.decode(b"more"), Ok(Step::End { end: 0 }));
    assert!(d.is_done());
}

#[test]
fn malformed_sizes_are_refused() {
    for body in [
        &b"\r\n"[..],
        b"x\r\n",
        b";ext\r\n",
        b" 5\r\nhello\r\n",
        b"5 x\r\n",
        b"5\rX",
        b"-1\r\n",
        b"0x5\r\n",
    ] {
        assert_eq!(
            decode_pieces([body]),
            Err(ChunkError::BadSize),
            "{:?}",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn a_size_over_sixteen_hex_digits_overflows() {
    assert!(decode_pieces([&b"ffffffffffffffff\r\n"[..]]).is_ok());
    assert_eq!(
        decode_pieces([&b"10000000000000000\r\n"[..]]),
        Err(ChunkError::SizeOverflow)
    );
}

#[test]
fn data_longer_or_shorter_than_its_size_is_refused() {
    assert_eq!(
        decode_pieces([&b"3\r\nabcd\r\n0\r\n\r\n"[..]]),
        Err(ChunkError::MissingLineEnd)
    );
    assert_eq!(
        decode_pieces([&b"3\r\na\r\n0\r\n\r\n"[..]]),
        Err(ChunkError::MissingLineEnd)
    );
    assert_eq!(
        decode_pieces([&b"3\r\nabc\rX"[..]]),
        Err(ChunkError::MissingLineEnd)
    );
    assert_eq!(
        decode_pieces([&b"0\r\n\rX"[..]]),
        Err(ChunkError::MissingLineEnd)
    );
}

#[test]
fn endless_extensions_or_trailers_are_refused() {
    let mut ext = b"1;".to_vec();
    ext.extend(std::iter::repeat_n(b'a', MAX_FRAMING_BYTES));
    assert_eq!(decode_pieces([&ext[..]]), Err(ChunkError::TooMuchFraming));
    let mut trailer = b"0\r\n".to_vec();
    trailer.extend(std::iter::repeat_n(b'a', MAX_FRAMING_BYTES + 1));
    assert_eq!(
        decode_pieces([&trailer[..]]),
        Err(ChunkError::TooMuchFraming)
    );
    let mut within = b"1;".to_vec();
    within.extend(std::iter::repeat_n(b'a', MAX_FRAMING_BYTES - 1));
    within.extend_from_slice(b"\r\nz\r\n0\r\n\r\n");
    assert_eq!(decode_pieces([&within[..]]), ok(b"z", b""));
}

#[test]
fn bodiless_statuses_have_no_body() {
    for status in [100, 101, 103, 199, 204, 304] {
        assert_eq!(
            framing(status, &[b"chunked"], &[b"5"]),
            Ok(Framing::Empty),
            "{status}"
        );
    }
}

#[test]
fn chunked_as_the_last_coding_wins_over_content_length() {
    assert_eq!(framing(200, &[b"chunked"], &[b"5"]), Ok(Framing::Chunked));
    assert_eq!(framing(200, &[b"Chunked"], &[]), Ok(Framing::Chunked));
    assert_eq!(framing(200, &[b"gzip, chunked"], &[]), Ok(Framing::Chunked));
    assert_eq!(
        framing(200, &[b"gzip", b" chunked "], &[]),
        Ok(Framing::Chunked)
    );
    assert_eq!(
        framing(200, &[b"chunked, gzip"], &[b"5"]),
        Ok(Framing::UntilClose)
    );
    assert_eq!(framing(200, &[b"identity"], &[]), Ok(Framing::UntilClose));
    assert_eq!(framing(200, &[b" , "], &[b"3"]), Ok(Framing::Length(3)));
}

#[test]
fn content_length_values_must_agree() {
    assert_eq!(framing(200, &[], &[b"0"]), Ok(Framing::Length(0)));
    assert_eq!(framing(500, &[], &[b" 42 "]), Ok(Framing::Length(42)));
    assert_eq!(framing(200, &[], &[b"42", b"42"]), Ok(Framing::Length(42)));
    assert_eq!(framing(200, &[], &[b"42, 42"]), Ok(Framing::Length(42)));
    assert_eq!(
        framing(200, &[], &[b"18446744073709551615"]),
        Err(FramingError::BadContentLength)
    );
    assert_eq!(
        framing(200, &[], &[b"9999999999999999999"]),
        Ok(Framing::Length(9_999_999_999_999_999_999))
    );
    for bad in [
        &[&b"42"[..], b"43"][..],
        &[b"42, 43"],
        &[b"-1"],
        &[b"+1"],
        &[b"0x10"],
        &[b""],
        &[b"1 2"],
        &[b"4a"],
    ] {
        assert_eq!(
            framing(200, &[], bad),
            Err(FramingError::BadContentLength),
            "{bad:?}"
        );
    }
}

#[test]
fn no_length_and_no_coding_runs_until_close() {
    assert_eq!(framing(200, &[], &[]), Ok(Framing::UntilClose));
    assert_eq!(framing(502, &[], &[]), Ok(Framing::UntilClose));
}

#[test]
fn framing_is_skipped_up_to_data_or_the_end_and_no_further() {
    let mut d = Chunked::new();
    assert_eq!(d.skip_framing(b"3\r\nabc"), Ok(3));
    assert_eq!(d.skip_framing(b"abc"), Ok(0));
    assert_eq!(d.decode(b"abc"), Ok(Step::Data { start: 0, end: 3 }));
    assert_eq!(d.skip_framing(b"\r\n0\r\n\r\nnext"), Ok(7));
    assert!(d.is_done());
    assert_eq!(d.skip_framing(b"next"), Ok(0));
}
