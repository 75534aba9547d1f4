//! Fuzzes llama-server format parsing: `llamatap_wire::llama::parse_event` and
//! `parse_response` for every `StreamFormat::ALL`.
//!
//! Input layout: `[k, name .., data ..]`: the event name is the next
//! `k % 64` bytes (fewer if the input is shorter), the rest is the event's
//! `data` and also the whole response body given to `parse_response`.
//!
//! Invariants:
//! - never panics;
//! - `data: [DONE]` gives a delta with only `done` set;
//! - `visible`, when present, is non-empty;
//! - `visible_text_chars` of a response is at most the body's byte length;
//! - `CountScanner` gives the same facts fed whole or cut in two at `k`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llamatap_wire::llama::{parse_event, parse_response, CountScanner, Delta, StreamFormat};
use llamatap_wire::sse::SseEvent;

fuzz_target!(|input: &[u8]| {
    let Some((&k, rest)) = input.split_first() else {
        return;
    };
    let (event, data) = rest.split_at(usize::from(k % 64).min(rest.len()));
    let ev = SseEvent { event, data };
    for format in StreamFormat::ALL {
        let delta = parse_event(format, &ev);
        if ev.is_done() {
            let want = Delta {
                done: true,
                ..Delta::default()
            };
            assert_eq!(delta, want, "[DONE] in {format}");
        }
        if let Some(v) = &delta.visible {
            assert!(!v.is_empty(), "empty visible text in {format}");
        }
        let facts = parse_response(format, data);
        assert!(
            facts.visible_text_chars <= data.len(),
            "{format}: {} visible chars in a {}-byte body",
            facts.visible_text_chars,
            data.len()
        );
        // The counts read as the body passes do not depend on its chunks.
        let (a, b) = data.split_at(usize::from(k).min(data.len()));
        let mut whole = CountScanner::new();
        whole.feed(data);
        let mut cut = CountScanner::new();
        cut.feed(a);
        cut.feed(b);
        assert_eq!(whole.finish(format), cut.finish(format), "{format}");
    }
});
