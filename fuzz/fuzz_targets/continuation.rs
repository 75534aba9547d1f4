//! Fuzzes continuing a cut stream: `llamatap_wire::continuation::Rewriter` (a
//! continuation's native `/completion` stream rewritten into the client's)
//! and `llamatap_wire::continuation::next` (planning the next attempt).
//!
//! Input layout: `[flags, m, t, h, k, n, len_1 .. len_n, body .., stream ..]`
//! - `flags & 3` is the client's stream: 0 chat (ids from a chat chunk),
//!   1 text completion (ids from a text-completion chunk), 2 native (no
//!   ids), 3 chat from a chunk without `system_fingerprint` and with index 1;
//!   `next` is asked about the same shape (chat, completions, native, chat);
//!   bit 2: `logprobs`; bit 3: `include_usage`; bit 4: `max_event_bytes` is
//!   `4 * m` (0..=1020), else 1 MiB;
//! - `t`: `tokens_before` (and `Heard::token_events`), 255 meaning `u64::MAX`;
//! - `h`: `Heard`'s booleans, bit 0 `hidden`, 1 `overflow`, 2 `mid_event`,
//!   3 `error`, 4 `skipped_events`, 5 `finished`; bit 6: `ids` are the
//!   stream's first `t` bytes (one id each), else `None`; bit 7:
//!   `first_event` is the shape's first chunk (`None` if native), else the
//!   stream bytes;
//! - `k`: the request body given to `next` is the next `k` bytes (fewer if
//!   the input is shorter);
//! - `n % 16` chunk lengths follow (bytes, used cyclically, 0 = an empty
//!   chunk); `n % 16 == 0` feeds the stream one byte at a time;
//! - the rest is the target's stream; its longest UTF-8 prefix is also
//!   `Heard::text`.
//!
//! Invariants:
//! - never panics;
//! - the output bytes, `ended()` and `counts()` are the same for the chunked
//!   feed and a one-shot feed; each `feed` returns `ended()`, and once true
//!   it stays true;
//! - once ended, feeding more (the rest of the chunks, then all of them
//!   again and another last event) adds nothing and changes no count;
//! - for a chat or text-completion client, the output is UTF-8, a run of
//!   `data: <chunk>\n\n` events whose `stream_ids` are the client's (index 0
//!   in a chat usage chunk, which has no choice), and `data: [DONE]\n\n` is
//!   in it (once, last) exactly when it ended;
//! - `next(shape, body, &heard)` never panics for any body; a refusal has a
//!   non-empty word; an end's tail is empty or ends with a blank line; a
//!   planned rest has stream ids unless native; its `completion_body`
//!   (after a rendered prompt) is a native request `plan_for` accepts, whose
//!   `max_tokens()` is the limit left (`remaining(tokens_before)`); its
//!   target passes the same rewriter checks.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llamatap_wire::continuation::{
    next, plan_for, stream_ids, Heard, Next, Rewriter, Shape, StreamIds, Target, TargetCounts,
};

const CHAT_FIRST: &[u8] = br#"{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1700000000,"id":"chatcmpl-x","model":"m","system_fingerprint":"b1","object":"chat.completion.chunk"}"#;
const TEXT_FIRST: &[u8] = br#"{"choices":[{"text":"Hi","index":0,"logprobs":null,"finish_reason":null}],"created":1700000000,"model":"m","system_fingerprint":"b1","object":"text_completion","id":"cmpl-x"}"#;
const BARE_FIRST: &[u8] = br#"{"choices":[{"finish_reason":null,"index":1,"delta":{"content":"Hi"}}],"created":-5,"id":"c\"\u00e9","model":"","object":"chat.completion.chunk"}"#;

// === input decoding ===

struct Case<'a> {
    shape: Shape,
    first: Option<&'a [u8]>,
    target: Target,
    max: usize,
    t: u8,
    h: u8,
    tokens: u64,
    body: &'a [u8],
    lens: &'a [u8],
    stream: &'a [u8],
}

fn decode(data: &[u8]) -> Option<Case<'_>> {
    let (&[flags, m, t, h, k, n], rest) = data.split_first_chunk::<6>()?;
    let (shape, first) = match flags & 3 {
        0 => (Shape::Chat, Some(CHAT_FIRST)),
        1 => (Shape::Completions, Some(TEXT_FIRST)),
        2 => (Shape::Native, None),
        _ => (Shape::Chat, Some(BARE_FIRST)),
    };
    let tokens = if t == 255 { u64::MAX } else { u64::from(t) };
    let target = Target {
        ids: first.map(|f| stream_ids(f).expect("the first chunks have ids")),
        tokens_before: tokens,
        logprobs: flags & 4 != 0,
        include_usage: flags & 8 != 0,
    };
    let max = if flags & 16 != 0 {
        4 * usize::from(m)
    } else {
        1 << 20
    };
    let (body, rest) = rest.split_at(usize::from(k).min(rest.len()));
    let (lens, stream) = rest.split_at(usize::from(n % 16).min(rest.len()));
    Some(Case {
        shape,
        first,
        target,
        max,
        t,
        h,
        tokens,
        body,
        lens,
        stream,
    })
}

/// Cuts `stream` into chunks of the lengths in `lens` (cyclically).
fn chunks<'a>(stream: &'a [u8], lens: &[u8]) -> Vec<&'a [u8]> {
    if lens.is_empty() {
        return stream.chunks(1).collect();
    }
    let mut out = Vec::new();
    let mut rest = stream;
    'outer: while !rest.is_empty() {
        let mut progressed = false;
        for &len in lens {
            let (chunk, tail) = rest.split_at(usize::from(len).min(rest.len()));
            progressed |= !chunk.is_empty();
            out.push(chunk);
            rest = tail;
            if rest.is_empty() {
                break 'outer;
            }
        }
        if !progressed {
            out.push(rest);
            break;
        }
    }
    out
}

/// The longest valid UTF-8 prefix of `bytes`.
fn utf8_prefix(bytes: &[u8]) -> &str {
    match std::str::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default(),
    }
}

// === the rewriter ===

/// Feeds `chunks` to a new rewriter: its output, `ended()` and `counts()`.
/// Once ended, it is fed the same chunks and another last event again.
fn run(target: &Target, max: usize, chunks: &[&[u8]]) -> (Vec<u8>, bool, TargetCounts) {
    let mut r = Rewriter::new(target.clone(), max);
    let mut out = Vec::new();
    // The output's length when the end was written.
    let mut at_end = None;
    for chunk in chunks {
        let ended = r.feed(chunk, &mut out);
        assert_eq!(ended, r.ended(), "feed() disagrees with ended()");
        match at_end {
            Some(len) => {
                assert!(ended, "ended, then not");
                assert_eq!(out.len(), len, "feeding after the end wrote more");
            }
            None if ended => at_end = Some(out.len()),
            None => {}
        }
    }
    let got = (out.clone(), r.ended(), r.counts());
    if got.1 {
        let last: [&[u8]; 1] = [b"data: {\"content\":\"x\",\"stop\":true}\n\n"];
        for chunk in chunks.iter().chain(&last) {
            assert!(r.feed(chunk, &mut out), "not ended after the end");
        }
        assert_eq!(out, got.0, "feeding after the end wrote more");
        assert_eq!(r.counts(), got.2, "feeding after the end changed counts()");
    }
    got
}

/// The output of a chat or text-completion client: `data: <chunk>` events
/// with the client's stream ids, then `data: [DONE]` exactly when it ended.
fn check_chunks(out: &[u8], ended: bool, ids: &StreamIds) {
    let text = std::str::from_utf8(out).expect("output is not UTF-8");
    assert!(
        text.is_empty() || text.ends_with("\n\n"),
        "output ends inside an event"
    );
    let events: Vec<&str> = text.split_terminator("\n\n").collect();
    let done = events.iter().filter(|e| **e == "data: [DONE]").count();
    assert_eq!(done, usize::from(ended), "[DONE] count, ended {ended}");
    if ended {
        assert_eq!(events.last(), Some(&"data: [DONE]"), "[DONE] is not last");
    }
    for e in &events {
        if *e == "data: [DONE]" {
            continue;
        }
        let data = e
            .strip_prefix("data: ")
            .unwrap_or_else(|| panic!("not a data event: {e:?}"));
        let got = stream_ids(data.as_bytes())
            .unwrap_or_else(|| panic!("a chunk without the stream's ids: {data:?}"));
        // The chat usage chunk has no choice, so no index.
        let index = if data.starts_with(r#"{"choices":[],"#) {
            0
        } else {
            ids.index
        };
        let want = StreamIds {
            index,
            ..ids.clone()
        };
        assert_eq!(got, want, "a chunk with other ids: {data:?}");
    }
}

fn check_rewriter(target: &Target, max: usize, lens: &[u8], stream: &[u8]) {
    let chunked = run(target, max, &chunks(stream, lens));
    let whole = run(target, max, &[stream]);
    assert_eq!(chunked.0, whole.0, "chunked output differs from one-shot");
    assert_eq!(chunked.1, whole.1, "chunked ended() differs from one-shot");
    assert_eq!(chunked.2, whole.2, "chunked counts() differ from one-shot");
    if let Some(ids) = &target.ids {
        check_chunks(&whole.0, whole.1, ids);
    }
}

// === the next attempt ===

fn check_next(case: &Case<'_>) {
    let h = case.h;
    let heard_ids = &case.stream[..usize::from(case.t).min(case.stream.len())];
    let ids: Vec<u32> = heard_ids.iter().map(|&b| u32::from(b)).collect();
    let heard = Heard {
        text: utf8_prefix(case.stream),
        ids: (h & 64 != 0).then_some(ids.as_slice()),
        token_events: case.tokens,
        first_event: if h & 128 != 0 {
            case.first
        } else {
            Some(case.stream)
        },
        hidden: h & 1 != 0,
        overflow: h & 2 != 0,
        mid_event: h & 4 != 0,
        error: h & 8 != 0,
        skipped_events: h & 16 != 0,
        finished: h & 32 != 0,
    };
    match next(case.shape, case.body, &heard) {
        Next::Refused(why) => assert!(!why.is_empty(), "empty refusal"),
        Next::End { tail, why } => {
            assert!(!why.is_empty(), "empty end word");
            assert!(
                tail.is_empty() || tail.ends_with(b"\n\n"),
                "tail ends inside an event"
            );
        }
        Next::Generate(rest) => {
            assert_eq!(
                rest.target.ids.is_none(),
                case.shape == Shape::Native,
                "stream ids for {:?}",
                case.shape
            );
            // The target's request can itself be continued (the answer
            // can move again), with the limit that is left.
            let body = rest.completion_body(Some("<rendered>"));
            let again = plan_for(Shape::Native, &body).unwrap_or_else(|r| {
                panic!(
                    "completion body refused ({}): {}",
                    r.as_str(),
                    String::from_utf8_lossy(&body)
                )
            });
            assert_eq!(
                again.max_tokens(),
                rest.plan.remaining(rest.target.tokens_before),
                "completion body's n_predict"
            );
            check_rewriter(&rest.target, case.max, case.lens, case.stream);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some(case) = decode(data) else {
        return;
    };
    check_rewriter(&case.target, case.max, case.lens, case.stream);
    check_next(&case);
});
