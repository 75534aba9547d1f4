#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod proptests;

use super::*;

/// One dispatched event, owned: (event name, data).
pub(super) type Owned = (Vec<u8>, Vec<u8>);

/// What a whole stream gave: events, skipped count, `has_pending()` at its end.
#[derive(Debug, PartialEq)]
pub(super) struct Outcome {
    pub(super) events: Vec<Owned>,
    pub(super) skipped: u64,
    pub(super) truncated: bool,
}

pub(super) fn run<'a>(max: usize, chunks: impl IntoIterator<Item = &'a [u8]>) -> Outcome {
    let mut reader = SseReader::new(max);
    let mut events = Vec::new();
    for chunk in chunks {
        reader.feed(chunk, |e| events.push((e.event.to_vec(), e.data.to_vec())));
    }
    let skipped = reader.skipped_events();
    let truncated = reader.has_pending();
    Outcome {
        events,
        skipped,
        truncated,
    }
}

pub(super) fn one_shot(max: usize, bytes: &[u8]) -> Outcome {
    run(max, [bytes])
}

/// Cuts `bytes` at the given sorted positions.
pub(super) fn cut<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    for &c in cuts {
        out.push(&bytes[start..c]);
        start = c;
    }
    out.push(&bytes[start..]);
    out
}

macro_rules! fixture {
    ($name:literal) => {
        (
            $name,
            include_bytes!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/sse/",
                $name
            ))
            .as_slice(),
        )
    };
}

const FIXTURES: &[(&str, &[u8])] = &[
    fixture!("openai_chat.txt"),
    fixture!("openai_chat_tools.txt"),
    fixture!("openai_chat_error.txt"),
    fixture!("openai_completion.txt"),
    fixture!("native_completion.txt"),
    fixture!("anthropic_messages.txt"),
    fixture!("anthropic_tool_use.txt"),
    fixture!("anthropic_error.txt"),
    fixture!("openai_responses.txt"),
    fixture!("grammar_mixed.txt"),
];

pub(super) const BIG: usize = 1 << 20;

/// `bytes` with every LF replaced by `ending`.
fn with_line_ending(bytes: &[u8], ending: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for &b in bytes {
        if b == b'\n' {
            out.extend_from_slice(ending);
        } else {
            out.push(b);
        }
    }
    out
}

// === fixtures ===

#[test]
fn grammar_fixture_gives_the_spec_events() {
    let (_, bytes) = FIXTURES
        .iter()
        .find(|(n, _)| *n == "grammar_mixed.txt")
        .unwrap();
    let out = one_shot(BIG, bytes);
    let expected: Vec<Owned> = vec![
        (b"greet".to_vec(), b"one\ntwo".to_vec()),
        (vec![], vec![]),
        (vec![], b" spaced".to_vec()),
        (vec![], b"[DONE]".to_vec()),
        (vec![], "é🦙".as_bytes().to_vec()),
    ];
    assert_eq!(
        out,
        Outcome {
            events: expected,
            skipped: 0,
            truncated: false
        }
    );
}

#[test]
fn fixtures_are_whole_streams() {
    for (name, bytes) in FIXTURES {
        let out = one_shot(BIG, bytes);
        assert!(!out.events.is_empty(), "{name}");
        assert!(!out.truncated, "{name}");
        assert_eq!(out.skipped, 0, "{name}");
    }
}

#[test]
fn every_single_cut_gives_the_same_events() {
    for (name, bytes) in FIXTURES {
        for ending in [&b"\n"[..], b"\r\n", b"\r"] {
            let bytes = with_line_ending(bytes, ending);
            let whole = one_shot(BIG, &bytes);
            for at in 0..=bytes.len() {
                assert_eq!(run(BIG, cut(&bytes, &[at])), whole, "{name} cut at {at}");
            }
        }
    }
}

#[test]
fn every_pair_of_cuts_gives_the_same_events_for_small_fixtures() {
    for (name, bytes) in FIXTURES.iter().filter(|(_, b)| b.len() <= 700) {
        let whole = one_shot(BIG, bytes);
        for a in 0..=bytes.len() {
            for b in a..=bytes.len() {
                assert_eq!(
                    run(BIG, cut(bytes, &[a, b])),
                    whole,
                    "{name} cut at {a},{b}"
                );
            }
        }
    }
}

#[test]
fn byte_by_byte_gives_the_same_events() {
    for (name, bytes) in FIXTURES {
        for max in [BIG, 300] {
            let whole = one_shot(max, bytes);
            assert_eq!(run(max, bytes.chunks(1)), whole, "{name} max {max}");
        }
    }
}

#[test]
fn line_endings_are_equivalent() {
    for (name, bytes) in FIXTURES.iter().filter(|(_, b)| !b.contains(&b'\r')) {
        let lf = one_shot(BIG, bytes);
        assert_eq!(
            one_shot(BIG, &with_line_ending(bytes, b"\r\n")),
            lf,
            "{name}"
        );
        assert_eq!(one_shot(BIG, &with_line_ending(bytes, b"\r")), lf, "{name}");
    }
}

// === grammar ===

#[test]
fn cr_then_lf_in_the_next_chunk_is_one_line_end() {
    let out = run(BIG, [&b"data: a\r"[..], b"\n\r", b"\n"]);
    assert_eq!(out.events, vec![(vec![], b"a".to_vec())]);
    // Two CRs are two line ends: the second is the blank line.
    let out = run(BIG, [&b"data: b\r"[..], b"\rdata: c\r\n\r\n"]);
    assert_eq!(
        out.events,
        vec![(vec![], b"b".to_vec()), (vec![], b"c".to_vec())]
    );
}

#[test]
fn fields_and_spaces() {
    let out = one_shot(
        BIG,
        b"data:x\n\ndata:  two spaces\n\ndata\ndata\n\nDATA: no\nevent: e\n\n",
    );
    let want: Vec<Owned> = vec![
        (vec![], b"x".to_vec()),
        (vec![], b" two spaces".to_vec()),
        (vec![], b"\n".to_vec()),
    ];
    assert_eq!(out.events, want);
    let out = one_shot(
        BIG,
        b"event: a\nevent: b\ndata: 1\nid: 9\nretry: 3\nfoo: bar\n\n",
    );
    assert_eq!(out.events, vec![(b"b".to_vec(), b"1".to_vec())]);
    // The event name does not leak into the next event.
    let out = one_shot(BIG, b"event: a\ndata: 1\n\ndata: 2\n\n");
    assert_eq!(out.events[1], (vec![], b"2".to_vec()));
}

#[test]
fn comments_and_pings_dispatch_nothing() {
    let out = one_shot(BIG, b":\n\n: keep-alive\n\n:\r\n\r\n");
    assert_eq!(
        out,
        Outcome {
            events: vec![],
            skipped: 0,
            truncated: false
        }
    );
    let out = one_shot(BIG, b"data: a\n: inside\ndata: b\n\n");
    assert_eq!(out.events, vec![(vec![], b"a\nb".to_vec())]);
}

#[test]
fn bom_is_stripped_once_even_when_split() {
    let stream = b"\xEF\xBB\xBFdata: a\n\n\xEF\xBB\xBFdata: b\n\ndata: c\n\n";
    let want = vec![(vec![], b"a".to_vec()), (vec![], b"c".to_vec())];
    for at in 0..=4 {
        assert_eq!(run(BIG, cut(stream, &[at])).events, want, "cut at {at}");
    }
    assert_eq!(run(BIG, stream.chunks(1)).events, want);
    // A BOM prefix that turns out not to be one is content (an unknown field here).
    assert_eq!(
        run(BIG, [&b"\xEF"[..], b"\xBBdata: x\n\ndata: y\n\n"]).events,
        vec![(vec![], b"y".to_vec())]
    );
    assert_eq!(
        run(BIG, [&b"\xEF\xBB"[..], b"\n\ndata: y\n\n"]).events,
        vec![(vec![], b"y".to_vec())]
    );
    assert!(run(BIG, [&b"\xEF"[..]]).truncated);
}

#[test]
fn done_marker() {
    assert!(SseEvent {
        event: b"",
        data: b"[DONE]"
    }
    .is_done());
    assert!(!SseEvent {
        event: b"",
        data: b"[DONE] "
    }
    .is_done());
    assert!(!SseEvent {
        event: b"",
        data: b"{}"
    }
    .is_done());
}

#[test]
fn has_pending_reports_a_cut_event() {
    for (stream, truncated) in [
        (&b"data: a\n\n"[..], false),
        (b"data: a\n\n\r", false),
        (b"", false),
        (b"\xEF\xBB\xBF", false),
        (b"data: a\n", true),
        (b"data: a", true),
        (b"event: x\n", true),
        (b"data: a\n\ndata: b", true),
        // Part of a BOM, held back: the client holds bytes of no event yet,
        // and an error event written after them would not parse.
        (b"\xEF", true),
        (b"\xEF\xBB", true),
    ] {
        assert_eq!(
            one_shot(BIG, stream).truncated,
            truncated,
            "{:?}",
            String::from_utf8_lossy(stream)
        );
    }
}

#[test]
fn single_line_events_inside_one_chunk_are_borrowed() {
    let chunk = b": ping\n\nevent: e\ndata: {\"a\":1}\n\ndata: x\n\n";
    let range = chunk.as_ptr_range();
    let mut reader = SseReader::new(BIG);
    let mut n = 0;
    reader.feed(chunk, |e| {
        assert!(range.contains(&e.data.as_ptr()));
        n += 1;
    });
    assert_eq!(n, 2);
    assert_eq!(reader.data.capacity(), 0, "no buffer was needed");
}

// === oversize ===

#[test]
fn oversize_events_are_skipped_and_the_next_one_recovers() {
    let big = format!("data: {}\n\n", "x".repeat(100));
    let stream = format!("data: small\n\n{big}event: e\ndata: after\n\n{big}data: a\ndata: b\n\n");
    let out = one_shot(50, stream.as_bytes());
    let want: Vec<Owned> = vec![
        (vec![], b"small".to_vec()),
        (b"e".to_vec(), b"after".to_vec()),
        (vec![], b"a\nb".to_vec()),
    ];
    assert_eq!(
        out,
        Outcome {
            events: want,
            skipped: 2,
            truncated: false
        }
    );
    for at in 0..=stream.len() {
        assert_eq!(run(50, cut(stream.as_bytes(), &[at])), out, "cut at {at}");
    }
    assert_eq!(run(50, stream.as_bytes().chunks(1)), out);
}

#[test]
fn the_limit_counts_all_field_lines_of_an_event() {
    // "data: 1234" is 10 bytes: two such lines are 20.
    let two = b"data: 1234\ndata: 5678\n\n";
    assert_eq!(one_shot(20, two).events.len(), 1);
    assert_eq!(one_shot(19, two).skipped, 1);
    assert_eq!(one_shot(10, b"data: 1234\n\n").events.len(), 1);
    assert_eq!(one_shot(9, b"data: 1234\n\n").skipped, 1);
    // An oversize event at end of stream is pending, not counted.
    let out = one_shot(5, b"data: 1234567");
    assert_eq!((out.skipped, out.truncated), (0, true));
}

#[test]
fn memory_stays_bounded_by_the_limit() {
    let max = 4096;
    let mut reader = SseReader::new(max);
    let mut n = 0;
    reader.feed(b"data: ", |_| n += 1);
    for _ in 0..1000 {
        reader.feed(&[b'y'; 1000], |_| n += 1);
    }
    reader.feed(b"\ndata: more\n\ndata: ok\n\n", |_| n += 1);
    assert_eq!((n, reader.skipped_events()), (1, 1));
    assert!(
        reader.line.capacity() <= 2 * max,
        "{}",
        reader.line.capacity()
    );
    assert!(
        reader.data.capacity() <= 2 * max,
        "{}",
        reader.data.capacity()
    );
}

#[test]
fn buffers_shrink_after_a_large_event() {
    let mut reader = SseReader::new(1 << 20);
    let big = format!("data: {}\ndata: x\n\n", "z".repeat(200_000));
    let (a, b) = big.as_bytes().split_at(100_000);
    let mut sizes = Vec::new();
    reader.feed(a, |e| sizes.push(e.data.len()));
    reader.feed(b, |e| sizes.push(e.data.len()));
    assert_eq!(sizes, vec![200_002]);
    assert!(reader.line.capacity() <= KEEP_CAPACITY);
    assert!(reader.data.capacity() <= KEEP_CAPACITY);
}
