//! The streaming routes read the upstream's HTTP/1 themselves: every way an
//! upstream may frame a response reaches the client with the same bytes, and
//! a response that cannot be framed is an OpenAI-shaped error, before the
//! head a 502, after it an error event with a clean end.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Write;
use std::net::TcpStream;

use common::http;
use common::proxy::Llamatap;
use common::upstream::{self, Scripted};

const CHAT: &str =
    r#"{"model":"tiny.gguf","messages":[{"role":"user","content":"hi"}],"stream":true}"#;

/// Two chat events and the end marker, as llama-server sends them.
fn events() -> Vec<u8> {
    let mut body = upstream::chat_role_event().into_bytes();
    body.extend_from_slice(upstream::chat_event("Hello there.").as_bytes());
    body.extend_from_slice(b"data: [DONE]\n\n");
    body
}

/// An upstream answering every request with `raw` and closing.
fn raw_upstream(raw: Vec<u8>) -> Scripted {
    Scripted::start(move |s, _req| {
        let _ = s.write_all(&raw);
        let _ = s.flush();
    })
}

/// The client's status, body and whether the body ended cleanly.
fn fetch(up: &Scripted) -> (u16, Vec<u8>, bool) {
    let proxy = Llamatap::start(&up.url(), &[]);
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", CHAT).unwrap();
    let body = r.read_all().unwrap();
    (r.head.status, body, r.clean_end)
}

/// The client gets a 200 with exactly [`events`] and a clean end.
fn assert_events_arrive_whole(up: &Scripted) {
    let (status, body, clean) = fetch(up);
    assert_eq!(status, 200);
    assert_eq!(body, events());
    assert!(clean);
}

fn chunked(pieces: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in pieces {
        out.extend_from_slice(format!("{:x}\r\n", p.len()).as_bytes());
        out.extend_from_slice(p);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

#[test]
fn a_body_delimited_by_the_close_arrives_whole_and_ends_cleanly() {
    let mut raw =
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n".to_vec();
    raw.extend_from_slice(&events());
    assert_events_arrive_whole(&raw_upstream(raw));
}

#[test]
fn an_http_1_0_answer_with_a_length_arrives_whole() {
    let mut raw = format!(
        "HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\n\r\n",
        events().len()
    )
    .into_bytes();
    raw.extend_from_slice(&events());
    assert_events_arrive_whole(&raw_upstream(raw));
}

#[test]
fn chunk_extensions_trailers_and_bare_line_feeds_are_framing_not_body() {
    let e = events();
    let (a, b) = e.split_at(e.len() / 2);
    let mut raw =
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    raw.extend_from_slice(format!("{:X};name=\"v\"\r\n", a.len()).as_bytes());
    raw.extend_from_slice(a);
    raw.extend_from_slice(b"\r\n");
    raw.extend_from_slice(format!("{:x}\n", b.len()).as_bytes());
    raw.extend_from_slice(b);
    raw.extend_from_slice(b"\n0\r\nX-Trailer: 1\r\n\r\n");
    assert_events_arrive_whole(&raw_upstream(raw));
}

#[test]
fn a_head_and_body_dripped_byte_by_byte_arrive_whole() {
    let mut raw =
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    raw.extend_from_slice(&chunked(&[&events()]));
    let up = Scripted::start(move |s, _req| {
        s.set_nodelay(true).unwrap();
        for b in &raw {
            if s.write_all(std::slice::from_ref(b)).is_err() {
                return;
            }
        }
    });
    assert_events_arrive_whole(&up);
}

#[test]
fn informational_heads_are_skipped() {
    let mut raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    raw.extend_from_slice(&chunked(&[&events()]));
    assert_events_arrive_whole(&raw_upstream(raw));
}

#[test]
fn transfer_encoding_wins_over_content_length() {
    let mut raw = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    raw.extend_from_slice(&chunked(&[&events()]));
    let proxy_up = raw_upstream(raw);
    let proxy = Llamatap::start(&proxy_up.url(), &[]);
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", CHAT).unwrap();
    assert_eq!(r.head.header("content-length"), None);
    assert_eq!(r.read_all().unwrap(), events());
    assert!(r.clean_end);
}

#[test]
fn a_large_answer_with_a_length_arrives_byte_for_byte() {
    let body: Vec<u8> = (0..1_500_000u32).map(|i| b'a' + (i % 23) as u8).collect();
    let mut raw = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(&body);
    let (status, got, clean) = fetch(&raw_upstream(raw));
    assert_eq!(status, 200);
    assert!(got == body, "{} bytes of {}", got.len(), body.len());
    assert!(clean);
}

/// A 502 in the OpenAI shape naming a protocol error.
fn assert_protocol_error(raw: Vec<u8>) {
    let (status, body, _) = fetch(&raw_upstream(raw));
    assert_eq!(status, 502, "{}", String::from_utf8_lossy(&body));
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["type"], "upstream_error");
    assert_eq!(v["error"]["code"], "upstream_protocol_error", "{v}");
}

#[test]
fn conflicting_content_lengths_are_a_502() {
    assert_protocol_error(
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd".to_vec(),
    );
    assert_protocol_error(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\nabcd".to_vec());
}

#[test]
fn a_head_that_is_not_http_is_a_502() {
    assert_protocol_error(b"SSH-2.0-OpenSSH_9.6\r\n\r\n".to_vec());
    assert_protocol_error(b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n".to_vec());
}

#[test]
fn a_head_cut_by_the_close_is_a_502_disconnect() {
    let (status, body, _) = fetch(&raw_upstream(b"HTTP/1.1 200 OK\r\nContent-Ty".to_vec()));
    assert_eq!(status, 502);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["code"], "upstream_disconnected", "{v}");
}

#[test]
fn a_broken_chunk_mid_stream_ends_with_an_error_event() {
    let mut raw =
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    let first = upstream::chat_role_event();
    raw.extend_from_slice(format!("{:x}\r\n{first}\r\n", first.len()).as_bytes());
    raw.extend_from_slice(b"zz\r\nnot a chunk\r\n");
    let (status, body, clean) = fetch(&raw_upstream(raw));
    assert_eq!(status, 200);
    assert!(clean, "the stream must end properly after the error event");
    let text = String::from_utf8_lossy(&body);
    assert!(text.starts_with(&first), "{text}");
    assert!(!text.contains("not a chunk"), "{text}");
    let events = http::sse_data(&body);
    let last: serde_json::Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert_eq!(last["error"]["type"], "upstream_error", "{text}");
    assert_eq!(last["error"]["code"], "upstream_protocol_error", "{text}");
}

#[test]
fn the_request_head_and_a_small_body_reach_the_upstream_whole() {
    let up = Scripted::start(|s, req| {
        let digest = serde_json::json!({
            "path": req.path,
            "body": String::from_utf8_lossy(&req.body),
            "length": req.header("content-length"),
        });
        upstream::json(s, 200, &digest.to_string());
    });
    let proxy = Llamatap::start(&up.url(), &[]);
    let mut s = TcpStream::connect(proxy.addr()).unwrap();
    let req = format!(
        "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{CHAT}",
        CHAT.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut r = http::Reader::read_head(s).unwrap();
    assert_eq!(r.head.status, 200);
    let v: serde_json::Value = serde_json::from_slice(&r.read_all().unwrap()).unwrap();
    assert_eq!(v["path"], "/v1/chat/completions?x=1");
    // Whole, with the member asking llama-server for prompt progress
    // (`[ttft] prompt_progress`) first, and its length grown by it.
    let asked = format!("{{\"return_progress\":true,{}", &CHAT[1..]);
    assert_eq!(v["body"], asked);
    assert_eq!(v["length"], asked.len().to_string());
}

#[test]
fn two_chunks_read_at_once_leave_as_two_chunks() {
    // llama-server writes one chunk per event; when two reach llamatap in
    // one read they must still leave as two chunks, never merged.
    let first = upstream::chat_event("One.");
    let second = upstream::chat_event("Two.");
    let mut raw =
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    raw.extend_from_slice(&chunked(&[first.as_bytes(), second.as_bytes()]));
    let up = raw_upstream(raw);
    let proxy = Llamatap::start(&up.url(), &[]);
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", CHAT).unwrap();
    let mut pieces = Vec::new();
    while let Some(p) = r.next_piece().unwrap() {
        pieces.push(String::from_utf8(p).unwrap());
    }
    assert_eq!(pieces, [first, second]);
}
