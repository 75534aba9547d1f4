#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Property tests: any chunking of any stream gives the events a simple
//! model of the WHATWG rules predicts.

use proptest::prelude::*;

use super::{cut, one_shot, run, Outcome, BIG};

/// A line of the model stream.
#[derive(Clone, Debug)]
enum Line {
    Data(String),
    Event(String),
    Comment(String),
    Other(&'static str, String),
}

fn value() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[^\r\n]{0,12}").unwrap()
}

fn line() -> impl Strategy<Value = Line> {
    prop_oneof![
        4 => value().prop_map(Line::Data),
        1 => value().prop_map(Line::Event),
        1 => value().prop_map(Line::Comment),
        1 => (prop::sample::select(vec!["id", "retry", "foo", "dat"]), value()).prop_map(|(n, v)| Line::Other(n, v)),
    ]
}

/// Renders blocks with random line endings; returns bytes and the expected outcome.
fn render(
    blocks: &[Vec<Line>],
    endings: &[u8],
    bom: bool,
    terminated: bool,
    max: usize,
) -> (Vec<u8>, Outcome) {
    let mut bytes = if bom { vec![0xEF, 0xBB, 0xBF] } else { vec![] };
    let mut events = Vec::new();
    let mut skipped = 0;
    let mut k = 0;
    let mut end = |bytes: &mut Vec<u8>| {
        k += 1;
        let mut ending = [&b"\n"[..], b"\r\n", b"\r"][usize::from(endings[k % endings.len()] % 3)];
        if ending == b"\n" && bytes.last() == Some(&b'\r') {
            ending = b"\r\n"; // a lone LF after a CR would join it into one line end
        }
        bytes.extend_from_slice(ending);
    };
    for (i, block) in blocks.iter().enumerate() {
        let (mut name, mut data, mut size): (Vec<u8>, Option<Vec<u8>>, usize) = (vec![], None, 0);
        for line in block {
            let start = bytes.len();
            match line {
                Line::Data(v) => {
                    bytes.extend_from_slice(format!("data: {v}").as_bytes());
                    match &mut data {
                        Some(d) => {
                            d.push(b'\n');
                            d.extend_from_slice(v.as_bytes());
                        }
                        None => data = Some(v.as_bytes().to_vec()),
                    }
                }
                Line::Event(v) => {
                    bytes.extend_from_slice(format!("event:{v}").as_bytes());
                    name = v.strip_prefix(' ').unwrap_or(v).as_bytes().to_vec();
                }
                Line::Comment(v) => bytes.extend_from_slice(format!(":{v}").as_bytes()),
                Line::Other(n, v) => bytes.extend_from_slice(format!("{n}: {v}").as_bytes()),
            }
            size += bytes.len() - start;
            end(&mut bytes);
        }
        let last = i + 1 == blocks.len();
        if !last || terminated {
            end(&mut bytes);
            if size > max {
                skipped += 1;
            } else if let Some(data) = data {
                events.push((name, data));
            }
        }
    }
    let truncated = !terminated && blocks.last().is_some_and(|b| !b.is_empty());
    (
        bytes,
        Outcome {
            events,
            skipped,
            truncated,
        },
    )
}

proptest! {
    #[test]
    fn any_chunking_of_any_stream_gives_the_model_events(
        blocks in prop::collection::vec(prop::collection::vec(line(), 0..5), 0..8),
        endings in prop::collection::vec(any::<u8>(), 1..8),
        bom in any::<bool>(),
        terminated in any::<bool>(),
        max in prop_oneof![Just(BIG), 10usize..80],
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let (bytes, want) = render(&blocks, &endings, bom, terminated, max);
        let mut at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        at.sort_unstable();
        prop_assert_eq!(&one_shot(max, &bytes), &want);
        prop_assert_eq!(&run(max, cut(&bytes, &at)), &want);
    }

    #[test]
    fn any_chunking_of_any_bytes_gives_the_one_shot_events(
        bytes in prop::collection::vec(prop::sample::select(b"data: x\r\n:event\xEF\xBB\xBF[DONE]".to_vec()), 0..200),
        max in prop_oneof![Just(BIG), 1usize..40],
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let mut at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        at.sort_unstable();
        prop_assert_eq!(run(max, cut(&bytes, &at)), one_shot(max, &bytes));
        prop_assert_eq!(run(max, bytes.chunks(1)), one_shot(max, &bytes));
    }
}
