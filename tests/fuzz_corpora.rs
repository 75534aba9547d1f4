#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Replays the fuzz corpora (`fuzz/corpus/<target>/`) and the minimised
//! crash reproducers (`fuzz/regressions/<target>/`, when present) through
//! the same invariant checks as the cargo-fuzz targets in `fuzz/fuzz_targets/`,
//! so every `cargo test` run re-checks what fuzzing found, on stable Rust.
//!
//! The checks are duplicated here on purpose (the fuzz crate is a separate
//! nightly-only workspace); keep the two in step when a target changes. The
//! one check not repeated is the SSE reader's allocation bound, which needs a
//! counting global allocator and so `unsafe` (forbidden in this package).
//!
//! A missing or empty corpus directory fails the test: a corpus that
//! silently disappeared would otherwise make the test pass vacuously.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use llamatap::config::{Config, Overrides, RawConfig};
use llamatap_wire::continuation::{
    next, plan_for, stream_ids, Heard, Next, Rewriter, Shape, StreamIds, Target, TargetCounts,
};
use llamatap_wire::llama::{parse_event, parse_response, CountScanner, Delta, StreamFormat};
use llamatap_wire::request::{inspect_body, Route, MAX_MODEL_BYTES};
use llamatap_wire::sentence::{Sentence, SentenceRule, MAX_SENTENCE_CHARS};
use llamatap_wire::sse::{SseEvent, SseReader};
use llamatap_wire::tracecontext::{
    format_traceparent, valid_tracestate, TraceParent, MAX_HEADER_BYTES,
};

// === replaying ===

/// The inputs of one target: every file of its corpus (which must exist and
/// be non-empty) and of its regression directory (which may be absent).
fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let corpus = fuzz.join("corpus").join(target);
    let mut files = read_dir(&corpus).unwrap_or_else(|e| {
        panic!("fuzz corpus {} is missing: {e}", corpus.display());
    });
    assert!(
        !files.is_empty(),
        "fuzz corpus {} is empty: run `cargo +nightly fuzz run {target}` (see fuzz/README.md)",
        corpus.display()
    );
    let regressions = fuzz.join("regressions").join(target);
    if regressions.exists() {
        files.extend(read_dir(&regressions).unwrap());
    }
    files
        .into_iter()
        .map(|path| {
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect()
}

fn read_dir(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

/// Runs `check` on every input of `target`; fails listing every input that panicked.
fn replay(target: &str, check: fn(&[u8])) {
    let inputs = inputs(target);
    let failed: Vec<String> = inputs
        .iter()
        .filter_map(|(path, bytes)| {
            catch_unwind(AssertUnwindSafe(|| check(bytes)))
                .err()
                .map(|cause| {
                    let why = cause
                        .downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| cause.downcast_ref::<&str>().copied())
                        .unwrap_or("(non-string panic)");
                    format!("{}: {why}", path.display())
                })
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} {target} inputs broke an invariant:\n{}",
        failed.len(),
        inputs.len(),
        failed.join("\n")
    );
}

/// The longest valid UTF-8 prefix of `bytes`.
fn utf8_prefix(bytes: &[u8]) -> &str {
    match std::str::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap(),
    }
}

// === sse ===

const BOM: &[u8] = b"\xEF\xBB\xBF";

type Event = (Vec<u8>, Vec<u8>);

#[derive(Debug, PartialEq)]
struct SseOutcome {
    events: Vec<Event>,
    skipped: u64,
    /// `has_pending()` at the end.
    pending: bool,
}

/// `[m0, m1, n, len_1 .. len_n, stream ..]`, as in `fuzz_targets/sse.rs`.
fn sse_decode(data: &[u8]) -> Option<(usize, &[u8], &[u8])> {
    let (&[m0, m1, n], rest) = data.split_first_chunk::<3>()?;
    let sel = u16::from_le_bytes([m0, m1]);
    let max = if sel & 0x8000 != 0 {
        1 << 20
    } else {
        usize::from(sel & 0x3ff)
    };
    let n = usize::from(n % 16).min(rest.len());
    let (lens, stream) = rest.split_at(n);
    Some((max, lens, stream))
}

fn sse_chunks<'a>(stream: &'a [u8], lens: &[u8]) -> Vec<&'a [u8]> {
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

/// WHATWG event-stream parsing with the reader's size rule, written plainly.
fn sse_model(stream: &[u8], max: usize) -> SseOutcome {
    if !stream.is_empty() && stream.len() < BOM.len() && BOM.starts_with(stream) {
        // Only part of a BOM: held back, so the stream was cut short.
        return SseOutcome {
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
    SseOutcome {
        events,
        skipped,
        pending,
    }
}

fn sse_run(reader: &mut SseReader, chunks: &[&[u8]], max: usize) -> SseOutcome {
    let skipped_before = reader.skipped_events();
    let mut events: Vec<Event> = Vec::new();
    for chunk in chunks {
        reader.feed(chunk, |ev: &SseEvent<'_>| {
            assert!(
                ev.data.len() + ev.event.len() <= max,
                "event of {} + {} bytes exceeds max_event_bytes {max}",
                ev.data.len(),
                ev.event.len()
            );
            events.push((ev.event.to_vec(), ev.data.to_vec()));
        });
    }
    SseOutcome {
        events,
        skipped: reader.skipped_events() - skipped_before,
        pending: reader.has_pending(),
    }
}

fn check_sse(data: &[u8]) {
    let Some((max, lens, stream)) = sse_decode(data) else {
        return;
    };
    let want = sse_model(stream, max);
    let mut chunked = SseReader::new(max);
    let got = sse_run(&mut chunked, &sse_chunks(stream, lens), max);
    assert_eq!(got, want, "chunked feed differs from the model");
    let mut whole = SseReader::new(max);
    let once = sse_run(&mut whole, &[stream], max);
    assert_eq!(once, want, "one-shot feed differs from the model");
}

#[test]
fn sse_corpus_keeps_invariants() {
    replay("sse", check_sse);
}

// === sentence ===

/// `[n, len_1 .. len_n, text ..]`, as in `fuzz_targets/sentence.rs`.
fn sentence_decode(data: &[u8]) -> Option<(&[u8], &str)> {
    let (&n, rest) = data.split_first()?;
    let n = usize::from(n % 16).min(rest.len());
    let (lens, text) = rest.split_at(n);
    Some((lens, utf8_prefix(text)))
}

fn sentence_deltas<'a>(text: &'a str, lens: &[u8]) -> Vec<&'a str> {
    let bounds: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .collect();
    let chars = bounds.len() - 1;
    let lens: Vec<usize> = if lens.is_empty() {
        vec![1]
    } else {
        lens.iter().map(|&l| usize::from(l)).collect()
    };
    if lens.iter().all(|&l| l == 0) {
        return vec![""; lens.len()].into_iter().chain([text]).collect();
    }
    let mut out = Vec::new();
    let mut at = 0;
    for len in lens.iter().cycle() {
        if at >= chars {
            break;
        }
        let end = (at + len).min(chars);
        out.push(&text[bounds[at]..bounds[end]]);
        at = end;
    }
    out
}

fn sentence_run(deltas: &[&str]) -> Option<Sentence> {
    let mut rule = SentenceRule::new();
    let mut found = None;
    for delta in deltas {
        let got = rule.push(delta);
        if found.is_some() {
            assert_eq!(got, None, "a second sentence was reported");
        } else {
            found = got;
        }
        assert_eq!(rule.is_done(), found.is_some(), "is_done() disagrees");
    }
    let last = rule.finish();
    assert!(rule.is_done(), "not done after finish()");
    if found.is_some() {
        assert_eq!(last, None, "finish() reported a second sentence");
        found
    } else {
        last
    }
}

fn check_sentence(data: &[u8]) {
    let Some((lens, text)) = sentence_decode(data) else {
        return;
    };
    let whole = sentence_run(&[text]);
    if let Some(s) = &whole {
        assert_eq!(
            s.chars,
            s.text.chars().count(),
            "chars is not the char count"
        );
        assert!(!s.text.is_empty(), "empty sentence");
        assert_eq!(s.text, s.text.trim(), "sentence not trimmed");
        assert!(
            s.chars <= MAX_SENTENCE_CHARS,
            "sentence of {} chars",
            s.chars
        );
        assert!(
            s.text.chars().any(char::is_alphanumeric),
            "sentence without a letter or digit"
        );
        assert!(
            text.contains(&s.text),
            "sentence is not a part of the input"
        );
    }
    let cut = sentence_run(&sentence_deltas(text, lens));
    assert_eq!(
        cut, whole,
        "deltas give another sentence than the whole text"
    );
}

#[test]
fn sentence_corpus_keeps_invariants() {
    replay("sentence", check_sentence);
}

// === request ===

fn check_request(data: &[u8]) {
    let facts = inspect_body(data);
    if let Some(model) = &facts.model {
        assert!(!model.is_empty(), "empty model");
        assert!(
            model.len() <= MAX_MODEL_BYTES,
            "model of {} bytes",
            model.len()
        );
    }
    if !data.starts_with(BOM) {
        let mut bom = BOM.to_vec();
        bom.extend_from_slice(data);
        assert_eq!(inspect_body(&bom), facts, "a BOM changed the facts");
    }
    let path = utf8_prefix(data);
    let route = Route::from_path(path);
    assert!(Route::all().contains(&route), "route not in Route::all()");
    assert!(!route.as_str().is_empty());
    let bare = path.split(['?', '#']).next().unwrap_or_default();
    assert_eq!(Route::from_path(bare), route, "query changed the route");
    assert_eq!(Route::from_path(&format!("{bare}?stream=true")), route);
    // llama-server decodes the path before it routes: a path spelled all in
    // `%XX` (or `%u00XX`) is the route of the path it decodes to.
    if !bare.contains('%') {
        let hex: String = bare.bytes().map(|b| format!("%{b:02X}")).collect();
        assert_eq!(
            Route::from_path(&hex),
            route,
            "{bare:?} encoded changed the route"
        );
        if bare.is_ascii() {
            let wide: String = bare.bytes().map(|b| format!("%u00{b:02x}")).collect();
            assert_eq!(
                Route::from_path(&wide),
                route,
                "{bare:?} %u-encoded changed the route"
            );
        }
    }
    if route.stream_format().is_some() {
        assert!(
            route.operation_name().is_some(),
            "{path:?} has a stream format but route {route} generates nothing"
        );
    }
}

#[test]
fn request_corpus_keeps_invariants() {
    replay("request", check_request);
}

// === llama ===

/// `[k, name (k % 64 bytes), data ..]`, as in `fuzz_targets/llama.rs`.
fn check_llama(input: &[u8]) {
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
}

#[test]
fn llama_corpus_keeps_invariants() {
    replay("llama", check_llama);
}

// === tracecontext ===

fn trim_ows(mut b: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = b {
        b = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = b {
        b = rest;
    }
    b
}

fn check_tracecontext(data: &[u8]) {
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
        let trace_id: [u8; 16] = ids[..16].try_into().unwrap();
        let span_id: [u8; 8] = ids[16..24].try_into().unwrap();
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
}

#[test]
fn tracecontext_corpus_keeps_invariants() {
    replay("tracecontext", check_tracecontext);
}

// === config ===

fn assert_one_line(what: &str, message: &str) {
    assert!(
        !message.contains(['\n', '\r', '\u{0b}', '\u{0c}', '\u{85}', '\u{2028}', '\u{2029}']),
        "{what} error is not one line: {message:?}"
    );
}

fn check_config(data: &[u8]) {
    let raw = match RawConfig::from_toml(utf8_prefix(data)) {
        Ok(raw) => raw,
        Err(message) => {
            assert_one_line("from_toml", &message);
            return;
        }
    };
    match Config::from_raw(raw, &Overrides::default()) {
        Err(e) => assert_one_line("from_raw", &e.to_string()),
        Ok(c) => {
            assert!((1..=256).contains(&c.threads), "threads {}", c.threads);
            let r = c.telemetry.sample_ratio;
            assert!((0.0..=1.0).contains(&r), "sample ratio {r}");
            assert!(c.telemetry.max_event_bytes > 0 && c.telemetry.max_inspect_bytes > 0);
            assert!(c.telemetry.export_queue_size > 0 && c.recent_requests > 0);
            assert!(c.max_body_bytes > 0 && c.max_header_bytes > 0);
            assert!(!c.connect_timeout.is_zero() && !c.read_timeout.is_zero());
            assert!(!c.write_timeout.is_zero() && !c.pool_idle_timeout.is_zero());
            assert!(!c.model_refresh.is_zero());
            let host = &c.upstreams[0].host;
            assert!(c.upstreams[0].port > 0, "upstream port 0");
            assert!(
                !host.is_empty() && !host.contains(['[', ']']),
                "upstream host {host:?} (address {:?}) accepted",
                c.upstreams[0].address
            );
            assert!(c.api_keys.iter().all(|k| k.expose().len() >= 8));
        }
    }
}

#[test]
fn config_corpus_keeps_invariants() {
    replay("config", check_config);
}

// === continuation ===

const CHAT_FIRST: &[u8] = br#"{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1700000000,"id":"chatcmpl-x","model":"m","system_fingerprint":"b1","object":"chat.completion.chunk"}"#;
const TEXT_FIRST: &[u8] = br#"{"choices":[{"text":"Hi","index":0,"logprobs":null,"finish_reason":null}],"created":1700000000,"model":"m","system_fingerprint":"b1","object":"text_completion","id":"cmpl-x"}"#;
const BARE_FIRST: &[u8] = br#"{"choices":[{"finish_reason":null,"index":1,"delta":{"content":"Hi"}}],"created":-5,"id":"c\"\u00e9","model":"","object":"chat.completion.chunk"}"#;

struct ContinuationCase<'a> {
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

/// `[flags, m, t, h, k, n, len_1 .. len_n, body .., stream ..]`, as in
/// `fuzz_targets/continuation.rs`.
fn continuation_decode(data: &[u8]) -> Option<ContinuationCase<'_>> {
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
    Some(ContinuationCase {
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

/// Feeds `chunks` to a new rewriter: its output, `ended()` and `counts()`.
/// Once ended, it is fed the same chunks and another last event again.
fn continuation_run(
    target: &Target,
    max: usize,
    chunks: &[&[u8]],
) -> (Vec<u8>, bool, TargetCounts) {
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
fn continuation_check_chunks(out: &[u8], ended: bool, ids: &StreamIds) {
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

fn continuation_check_rewriter(target: &Target, max: usize, lens: &[u8], stream: &[u8]) {
    let chunked = continuation_run(target, max, &sse_chunks(stream, lens));
    let whole = continuation_run(target, max, &[stream]);
    assert_eq!(chunked.0, whole.0, "chunked output differs from one-shot");
    assert_eq!(chunked.1, whole.1, "chunked ended() differs from one-shot");
    assert_eq!(chunked.2, whole.2, "chunked counts() differ from one-shot");
    if let Some(ids) = &target.ids {
        continuation_check_chunks(&whole.0, whole.1, ids);
    }
}

fn continuation_check_next(case: &ContinuationCase<'_>) {
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
            continuation_check_rewriter(&rest.target, case.max, case.lens, case.stream);
        }
    }
}

fn check_continuation(data: &[u8]) {
    let Some(case) = continuation_decode(data) else {
        return;
    };
    continuation_check_rewriter(&case.target, case.max, case.lens, case.stream);
    continuation_check_next(&case);
}

#[test]
fn continuation_corpus_keeps_invariants() {
    replay("continuation", check_continuation);
}
