#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Property tests: any body chunked in any way, with any extensions and
//! trailers and cut into any pieces, decodes to its data.

use proptest::prelude::*;

use super::decode_pieces;

/// One chunk: its data, an extension, the size in upper case, bare LFs.
#[derive(Clone, Debug)]
struct Chunk {
    data: Vec<u8>,
    extension: Option<String>,
    upper: bool,
    bare_lf: bool,
}

fn chunk() -> impl Strategy<Value = Chunk> {
    (
        prop::collection::vec(any::<u8>(), 1..300),
        prop::option::of("[a-z=;\" ]{0,10}"),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(data, extension, upper, bare_lf)| Chunk {
            data,
            extension,
            upper,
            bare_lf,
        })
}

fn encode(chunks: &[Chunk], trailers: &[String]) -> Vec<u8> {
    let mut body = Vec::new();
    for c in chunks {
        let size = if c.upper {
            format!("{:X}", c.data.len())
        } else {
            format!("{:x}", c.data.len())
        };
        body.extend_from_slice(size.as_bytes());
        if let Some(e) = &c.extension {
            body.push(b';');
            body.extend_from_slice(e.as_bytes());
        }
        let eol: &[u8] = if c.bare_lf { b"\n" } else { b"\r\n" };
        body.extend_from_slice(eol);
        body.extend_from_slice(&c.data);
        body.extend_from_slice(eol);
    }
    body.extend_from_slice(b"0\r\n");
    for t in trailers {
        body.extend_from_slice(t.as_bytes());
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b"\r\n");
    body
}

/// `body` cut at the given fractions of its length.
fn cut(body: &[u8], cuts: &[prop::sample::Index]) -> Vec<Vec<u8>> {
    let mut at: Vec<usize> = cuts.iter().map(|i| i.index(body.len() + 1)).collect();
    at.sort_unstable();
    let mut pieces = Vec::new();
    let mut from = 0;
    for a in at {
        pieces.push(body[from..a].to_vec());
        from = a;
    }
    pieces.push(body[from..].to_vec());
    pieces
}

proptest! {
    #[test]
    fn any_chunking_cut_anywhere_decodes_to_the_data(
        chunks in prop::collection::vec(chunk(), 0..12),
        trailers in prop::collection::vec("[A-Za-z-]{1,8}: [ -~]{0,12}", 0..3),
        rest in prop::collection::vec(any::<u8>(), 0..20),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let mut body = encode(&chunks, &trailers);
        let end = body.len();
        body.extend_from_slice(&rest);
        let pieces = cut(&body, &cuts);
        let d = decode_pieces(pieces.iter().map(Vec::as_slice)).unwrap();
        let data: Vec<u8> = chunks.iter().flat_map(|c| c.data.clone()).collect();
        prop_assert_eq!(d.data, data);
        prop_assert!(d.ended);
        prop_assert_eq!(&d.after[..], &body[end..]);
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_data_never_exceeds_input(
        body in prop::collection::vec(any::<u8>(), 0..400),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let pieces = cut(&body, &cuts);
        if let Ok(d) = decode_pieces(pieces.iter().map(Vec::as_slice)) {
            prop_assert!(d.data.len() + d.after.len() <= body.len());
        }
    }
}
