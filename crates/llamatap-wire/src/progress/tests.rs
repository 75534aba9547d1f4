#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod proptests;

use super::*;

/// A chat stream of llama-server with `return_progress`, in its own shape.
const PROGRESS_1: &str = "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null}}],\"created\":1,\"id\":\"chatcmpl-1\",\"model\":\"m\",\"system_fingerprint\":\"b1\",\"object\":\"chat.completion.chunk\",\"prompt_progress\":{\"total\":700,\"cache\":3,\"processed\":3,\"time_ms\":0}}\n\n";
const PROGRESS_2: &str = "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null}}],\"created\":1,\"id\":\"chatcmpl-1\",\"model\":\"m\",\"system_fingerprint\":\"b1\",\"object\":\"chat.completion.chunk\",\"prompt_progress\":{\"total\":700,\"cache\":3,\"processed\":515,\"time_ms\":812}}\n\n";
const FIRST: &str = "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null}}],\"created\":1,\"id\":\"chatcmpl-1\",\"model\":\"m\",\"system_fingerprint\":\"b1\",\"object\":\"chat.completion.chunk\"}\n\n";
const TOKEN: &str = "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"content\":\"say \\\"prompt_progress\\\":{}\"}}],\"created\":1,\"id\":\"chatcmpl-1\",\"model\":\"m\",\"object\":\"chat.completion.chunk\"}\n\n";
const PING: &str = ":\n\n";
const DONE: &str = "data: [DONE]\n\n";

fn stream() -> (String, String) {
    let with = [PROGRESS_1, PING, PROGRESS_2, FIRST, TOKEN, DONE].concat();
    let without = [PING, FIRST, TOKEN, DONE].concat();
    (with, without)
}

/// Feeds `chunks` to a filter: the bytes out and the progress read.
fn run<'a>(
    strip: bool,
    max: usize,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> (Vec<u8>, Vec<PromptProgress>) {
    let mut f = ProgressFilter::new(strip, max);
    let mut out = Vec::new();
    let mut seen = Vec::new();
    for c in chunks {
        f.feed(c, &mut out, |p| seen.push(p));
    }
    f.finish(&mut out, |p| seen.push(p));
    (out, seen)
}

fn expected_progress() -> Vec<PromptProgress> {
    vec![
        PromptProgress {
            total: 700,
            cache: 3,
            processed: 3,
            time_ms: 0,
        },
        PromptProgress {
            total: 700,
            cache: 3,
            processed: 515,
            time_ms: 812,
        },
    ]
}

// === impl ProgressFilter ===

#[test]
fn progress_events_are_stripped_at_every_cut() {
    let (with, without) = stream();
    let bytes = with.as_bytes();
    for i in 0..=bytes.len() {
        let (out, seen) = run(true, 4096, [&bytes[..i], &bytes[i..]]);
        assert_eq!(out, without.as_bytes(), "cut at {i}");
        assert_eq!(seen, expected_progress(), "cut at {i}");
    }
}

#[test]
fn progress_events_are_stripped_in_chunks_of_every_size() {
    let (with, without) = stream();
    let bytes = with.as_bytes();
    for size in 1..=bytes.len() {
        let (out, seen) = run(true, 4096, bytes.chunks(size));
        assert_eq!(out, without.as_bytes(), "chunks of {size}");
        assert_eq!(seen, expected_progress(), "chunks of {size}");
    }
}

#[test]
fn reading_only_sends_nothing_and_reads_every_event() {
    let (with, _) = stream();
    let bytes = with.as_bytes();
    for i in 0..=bytes.len() {
        let (out, seen) = run(false, 4096, [&bytes[..i], &bytes[i..]]);
        assert!(out.is_empty());
        assert_eq!(seen, expected_progress(), "cut at {i}");
    }
}

#[test]
fn a_complete_event_is_never_held_back() {
    let (with, _) = stream();
    let mut f = ProgressFilter::new(true, 4096);
    let mut out = Vec::new();
    f.feed(FIRST.as_bytes(), &mut out, |_| {});
    assert_eq!(out, FIRST.as_bytes());
    assert!(f.is_idle());
    // Half of an event: held, and nothing sent.
    out.clear();
    let half = &TOKEN.as_bytes()[..40];
    f.feed(half, &mut out, |_| {});
    assert!(out.is_empty());
    assert!(!f.is_idle());
    f.feed(&TOKEN.as_bytes()[40..], &mut out, |_| {});
    assert_eq!(out, TOKEN.as_bytes());
    assert!(f.is_idle());
    drop(with);
}

#[test]
fn crlf_and_cr_line_ends_end_events() {
    for (end, line) in [("\r\n\r\n", "\r\n"), ("\r\r", "\r"), ("\n\r\n", "\n")] {
        let progress = PROGRESS_1.replace("\n\n", end);
        let token = TOKEN.replace("\n\n", end);
        let with = format!("{progress}{token}: c{line}{line}");
        let without = format!("{token}: c{line}{line}");
        let bytes = with.as_bytes();
        for i in 0..=bytes.len() {
            let (out, seen) = run(true, 4096, [&bytes[..i], &bytes[i..]]);
            assert_eq!(out, without.as_bytes(), "{end:?} cut at {i}");
            assert_eq!(seen.len(), 1, "{end:?} cut at {i}");
        }
    }
}

#[test]
fn an_event_ended_by_cr_waits_for_the_next_byte() {
    let mut f = ProgressFilter::new(true, 4096);
    let mut out = Vec::new();
    f.feed(b"data: x\r\r", &mut out, |_| {});
    assert!(out.is_empty());
    f.feed(b"\n", &mut out, |_| {});
    assert_eq!(out, b"data: x\r\r\n");
}

#[test]
fn events_that_only_look_like_progress_pass() {
    for event in [
        // Not at the top level.
        "data: {\"a\":{\"prompt_progress\":{\"total\":1,\"cache\":0,\"processed\":0,\"time_ms\":0}}}\n\n",
        // Two data lines.
        "data: {\"prompt_progress\":{\"total\":1,\"cache\":0,\"processed\":0,\"time_ms\":0}}\ndata: x\n\n",
        // A named event.
        "event: e\ndata: {\"prompt_progress\":{\"total\":1,\"cache\":0,\"processed\":0,\"time_ms\":0}}\n\n",
        // Not JSON.
        "data: {\"prompt_progress\":\n\n",
        "data: [DONE]\n\n",
        "\n",
    ] {
        let (out, seen) = run(true, 4096, [event.as_bytes()]);
        assert_eq!(out, event.as_bytes(), "{event}");
        assert!(seen.is_empty(), "{event}");
    }
}

#[test]
fn a_progress_event_whose_figures_do_not_read_is_stripped_unread() {
    let event = "data: {\"prompt_progress\":{\"total\":-1}}\n\n";
    let (out, seen) = run(true, 4096, [event.as_bytes()]);
    assert!(out.is_empty());
    assert!(seen.is_empty());
}

#[test]
fn an_event_over_the_bound_goes_out_as_it_comes() {
    let (with, without) = stream();
    let bytes = with.as_bytes();
    // Every event is longer than 64 bytes but the ping: nothing is held
    // past the bound, and so no progress event is stripped.
    for i in 0..=bytes.len() {
        let (out, seen) = run(true, 64, [&bytes[..i], &bytes[i..]]);
        assert_eq!(out, bytes, "cut at {i}");
        assert!(seen.is_empty());
    }
    drop(without);
    let mut f = ProgressFilter::new(true, 64);
    let mut out = Vec::new();
    f.feed(&TOKEN.as_bytes()[..100], &mut out, |_| {});
    assert_eq!(out, &TOKEN.as_bytes()[..100]);
}

#[test]
fn an_incomplete_last_event_goes_out_at_the_end() {
    let (out, seen) = run(true, 4096, [b"data: {\"prompt_progress\":{}}\n".as_slice()]);
    assert_eq!(out, b"data: {\"prompt_progress\":{}}\n");
    assert!(seen.is_empty());
}

// === impl ProgressAsk ===

fn ask<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut a = ProgressAsk::new();
    let mut out = Vec::new();
    for c in chunks {
        match a.feed(c) {
            Some(v) => out.extend_from_slice(&v),
            None => out.extend_from_slice(c),
        }
    }
    out.extend_from_slice(a.finish());
    out
}

#[test]
fn the_member_goes_first_at_every_cut() {
    let pad = format!("[1]{}", " ".repeat(ADDED));
    let cases: [(&str, &str); 5] = [
        (
            "{\"stream\":true,\"messages\":[]}",
            "{\"return_progress\":true,\"stream\":true,\"messages\":[]}",
        ),
        (
            " \n{ \"a\" : 1 }",
            " \n{ \"return_progress\":true,\"a\" : 1 }",
        ),
        ("{}", "{\"return_progress\":true }"),
        ("{ \n}", "{ \n\"return_progress\":true }"),
        ("[1]", &pad),
    ];
    for (body, want) in cases {
        assert_eq!(want.len(), body.len() + ADDED, "{body}");
        let b = body.as_bytes();
        for i in 0..=b.len() {
            for j in i..=b.len() {
                let got = ask([&b[..i], &b[i..j], &b[j..]]);
                assert_eq!(
                    String::from_utf8(got).unwrap(),
                    want,
                    "{body} cut at {i}, {j}"
                );
            }
        }
    }
}

#[test]
fn an_empty_or_unfinished_body_gets_spaces() {
    assert_eq!(ask([]), vec![b' '; ADDED]);
    assert_eq!(
        ask([b" {".as_slice()]),
        [b" {".as_slice(), &[b' '; ADDED]].concat()
    );
}

#[test]
fn the_clients_own_member_comes_after_ours() {
    let body = br#"{"return_progress":false,"prompt":"x"}"#;
    let out = ask([body.as_slice()]);
    let first = out
        .windows(17)
        .position(|w| w == b"\"return_progress\"")
        .unwrap();
    let last = out
        .windows(17)
        .rposition(|w| w == b"\"return_progress\"")
        .unwrap();
    assert!(first < last);
    assert!(out[last..].starts_with(b"\"return_progress\":false"));
}

#[test]
fn a_whole_body_is_asked_only_when_it_is_a_json_object() {
    assert_eq!(
        ask_whole(br#" {"a":1}"#).unwrap(),
        br#" {"return_progress":true,"a":1}"#
    );
    assert_eq!(ask_whole(b"{}").unwrap(), br#"{"return_progress":true }"#);
    for body in [
        b"{not json".as_slice(),
        b"[1]",
        b"",
        b"  ",
        b"{\"a\":1} x",
        b"\xEF\xBB\xBF{}",
    ] {
        assert_eq!(ask_whole(body), None, "{}", String::from_utf8_lossy(body));
    }
}

#[test]
fn chunks_after_the_member_pass_unchanged() {
    let mut a = ProgressAsk::new();
    assert!(a.feed(b"  ").is_none());
    assert!(a.feed(b"{\"a\"").is_some());
    assert!(a.feed(b":1}").is_none());
    assert!(a.finish().is_empty());
}
