//! Fuzzes `llamatap_wire::sse::SseReader`.
//!
//! Input layout: `[m0, m1, n, len_1 .. len_n, stream ..]`
//! - `max_event_bytes` = `1 << 20` if bit 15 of `u16::from_le_bytes([m0, m1])`
//!   is set, else its low 10 bits (0..=1023), so tiny limits are common;
//! - `n % 16` chunk lengths follow (bytes, used cyclically, 0 = an empty
//!   chunk); `n % 16 == 0` feeds the stream one byte at a time;
//! - the rest is the stream.
//!
//! Invariants:
//! - never panics;
//! - the events, `skipped_events()` and `has_pending()` at the end are the
//!   same for the chunked feed, a one-shot feed and a small independent
//!   model of the WHATWG rules with the size limit;
//! - every event has `data.len() + event.len() <= max_event_bytes`;
//! - the bytes the reader keeps allocated (measured by a counting global
//!   allocator) stay within `3 * max(2 * max_event_bytes, 8)`: each of its
//!   three buffers (line, data, event) holds at most `max_event_bytes`, and
//!   `Vec`'s amortised growth at most doubles that (the 16 KiB it keeps
//!   between events is never more than it grew to).
#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

use libfuzzer_sys::fuzz_target;
use llamatap_wire::sse::SseReader;

// === allocation accounting ===

/// Counts the net bytes allocated while `TRACK` is set (one fuzzing thread).
struct Counting;

static TRACK: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicIsize = AtomicIsize::new(0);

fn delta(bytes: usize, sign: isize) {
    if TRACK.load(Ordering::Relaxed) {
        LIVE.fetch_add(sign * bytes as isize, Ordering::Relaxed);
    }
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        delta(layout.size(), 1);
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        delta(layout.size(), 1);
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        delta(layout.size(), -1);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        delta(layout.size(), -1);
        delta(new_size, 1);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

// === input decoding ===

const BOM: &[u8] = b"\xEF\xBB\xBF";

struct Case<'a> {
    max: usize,
    lens: &'a [u8],
    stream: &'a [u8],
}

fn decode(data: &[u8]) -> Option<Case<'_>> {
    let (&[m0, m1, n], rest) = data.split_first_chunk::<3>()?;
    let sel = u16::from_le_bytes([m0, m1]);
    let max = if sel & 0x8000 != 0 {
        1 << 20
    } else {
        usize::from(sel & 0x3ff)
    };
    let n = usize::from(n % 16).min(rest.len());
    let (lens, stream) = rest.split_at(n);
    Some(Case { max, lens, stream })
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

// === the model ===

type Event = (Vec<u8>, Vec<u8>);

#[derive(Debug, PartialEq)]
struct Outcome {
    events: Vec<Event>,
    skipped: u64,
    /// `has_pending()` at the end.
    pending: bool,
}

/// WHATWG event-stream parsing with the reader's size rule, written plainly.
fn model(stream: &[u8], max: usize) -> Outcome {
    if !stream.is_empty() && stream.len() < BOM.len() && BOM.starts_with(stream) {
        // Only part of a BOM: held back, so the stream was cut short.
        return Outcome {
            events: vec![],
            skipped: 0,
            pending: true,
        };
    }
    let s = stream.strip_prefix(BOM).unwrap_or(stream);
    let mut events = Vec::new();
    let mut skipped = 0;
    let (mut size, mut data, mut name): (usize, Option<Vec<u8>>, Vec<u8>) = (0, None, vec![]);
    let mut start = 0;
    let mut i = 0;
    while i < s.len() {
        let b = s[i];
        if b != b'\n' && b != b'\r' {
            i += 1;
            continue;
        }
        let line = &s[start..i];
        i += if b == b'\r' && s.get(i + 1) == Some(&b'\n') {
            2
        } else {
            1
        };
        start = i;
        if line.is_empty() {
            if size > max {
                skipped += 1;
            } else if let Some(d) = data.take() {
                events.push((std::mem::take(&mut name), d));
            }
            (size, data, name) = (0, None, vec![]);
            continue;
        }
        size += line.len();
        if size > max || line[0] == b':' {
            continue;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(c) => {
                let v = &line[c + 1..];
                (&line[..c], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &[][..]),
        };
        match field {
            b"data" => match &mut data {
                Some(d) => {
                    d.push(b'\n');
                    d.extend_from_slice(value);
                }
                None => data = Some(value.to_vec()),
            },
            b"event" => name = value.to_vec(),
            _ => {}
        }
    }
    let pending = start < s.len() || size > 0;
    Outcome {
        events,
        skipped,
        pending,
    }
}

// === running the reader ===

fn run(reader: &mut SseReader, chunks: &[&[u8]], max: usize) -> Outcome {
    let skipped_before = reader.skipped_events();
    let bound = 3 * (2 * max).max(8) as isize;
    let mut events: Vec<Event> = Vec::new();
    for chunk in chunks {
        let base = LIVE.load(Ordering::Relaxed);
        TRACK.store(true, Ordering::Relaxed);
        reader.feed(chunk, |ev| {
            TRACK.store(false, Ordering::Relaxed);
            assert!(
                ev.data.len() + ev.event.len() <= max,
                "event of {} + {} bytes exceeds max_event_bytes {max}",
                ev.data.len(),
                ev.event.len()
            );
            events.push((ev.event.to_vec(), ev.data.to_vec()));
            TRACK.store(true, Ordering::Relaxed);
        });
        TRACK.store(false, Ordering::Relaxed);
        let held = LIVE.load(Ordering::Relaxed) - base + HELD.load(Ordering::Relaxed);
        HELD.store(held, Ordering::Relaxed);
        assert!(
            held <= bound,
            "reader holds {held} bytes (bound {bound}, max_event_bytes {max})"
        );
    }
    Outcome {
        events,
        skipped: reader.skipped_events() - skipped_before,
        pending: reader.has_pending(),
    }
}

/// Net bytes the current reader holds (tracked across `run` calls).
static HELD: AtomicIsize = AtomicIsize::new(0);

fuzz_target!(|data: &[u8]| {
    let Some(case) = decode(data) else {
        return;
    };
    let want = model(case.stream, case.max);

    HELD.store(0, Ordering::Relaxed);
    let mut chunked = SseReader::new(case.max);
    let got = run(&mut chunked, &chunks(case.stream, case.lens), case.max);
    assert_eq!(got, want, "chunked feed differs from the model");

    HELD.store(0, Ordering::Relaxed);
    let mut whole = SseReader::new(case.max);
    let once = run(&mut whole, &[case.stream], case.max);
    assert_eq!(once, want, "one-shot feed differs from the model");
});
