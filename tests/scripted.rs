//! The proxy against a scripted upstream: what a real llama-server cannot be
//! made to do on cue (byte cuts, drips, deaths, garbage, stalls, refusals),
//! and exact timing of the upstream close after a client hang-up.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::http;
use common::proxy::{metric_sum, Llamatap};
use common::upstream::{self, next_request, Scripted};
use common::wait_until;

fn chat_stream_bytes(words: &[&str]) -> Vec<u8> {
    let mut s = upstream::chat_role_event();
    s.push_str(": ping\n\n");
    for w in words {
        s.push_str(&upstream::chat_event(w));
    }
    s.push_str(&upstream::chat_final_event(12, 3, words.len() as u64));
    s.push_str("data: [DONE]\n\n");
    s.into_bytes()
}

const CHAT: &str =
    r#"{"model":"tiny.gguf","messages":[{"role":"user","content":"hi"}],"stream":true}"#;

#[test]
fn stream_bytes_pass_unchanged_whatever_the_cuts() {
    let words = [
        "Héllo",
        " wörld",
        ". ",
        "你好",
        "。",
        " 🎉 done",
        "\n",
        "end",
    ];
    let body = chat_stream_bytes(&words);
    let cuts: Arc<Mutex<Vec<usize>>> = Arc::new(Mutex::new(Vec::new()));
    let b = body.clone();
    let c = cuts.clone();
    let up = Scripted::start(move |s, _req| {
        let step = c.lock().unwrap().pop().unwrap_or(7);
        upstream::sse_head(s);
        for piece in b.chunks(step) {
            upstream::chunk(s, piece);
        }
        upstream::end_chunks(s);
    });
    let proxy = Llamatap::start(&up.url(), &[]);
    // Every chunk size from 1 byte (cuts inside UTF-8 characters) to the whole body.
    let sizes: Vec<usize> = vec![1, 2, 3, 5, 13, 64, 251, body.len()];
    cuts.lock().unwrap().extend(sizes.iter().rev());
    for size in sizes {
        let mut r = http::post(&proxy.addr(), "/v1/chat/completions", CHAT).unwrap();
        assert_eq!(r.head.status, 200);
        assert_eq!(r.head.header("content-type"), Some("text/event-stream"));
        assert_eq!(r.head.header("x-accel-buffering"), Some("no"));
        assert_eq!(r.head.header("cache-control"), Some("no-cache"));
        let got = r.read_all().unwrap();
        assert!(r.clean_end);
        assert_eq!(got, body, "bytes differ with {size}-byte upstream chunks");
    }
    let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
        metric_sum(m, "llamatap_requests_total", &["outcome=\"ok\""]) >= 8.0
    });
    assert_eq!(
        metric_sum(
            &m,
            "llamatap_requests_total",
            &["route=\"chat_completions\"", "outcome=\"ok\""]
        ),
        8.0
    );
    assert_eq!(
        metric_sum(&m, "llamatap_sse_events_skipped_total", &[]),
        0.0
    );
}

#[test]
fn events_are_forwarded_one_by_one_as_they_arrive() {
    let gap = Duration::from_millis(150);
    let sent: Arc<Mutex<Vec<Instant>>> = Arc::new(Mutex::new(Vec::new()));
    let log = sent.clone();
    let up = Scripted::start(move |s, _req| {
        upstream::sse_head(s);
        for i in 0..6 {
            std::thread::sleep(gap);
            log.lock().unwrap().push(Instant::now());
            upstream::chunk(s, upstream::chat_event(&format!("w{i} ")).as_bytes());
        }
        std::thread::sleep(gap);
        log.lock().unwrap().push(Instant::now());
        upstream::chunk(s, b"data: [DONE]\n\n");
        upstream::end_chunks(s);
    });
    let proxy = Llamatap::start(&up.url(), &[]);
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", CHAT).unwrap();
    let pieces = r.pieces_timed().unwrap();
    let sent = sent.lock().unwrap().clone();
    // Six token events arrive as six separate pieces, each before the
    // upstream sent the next event: nothing waits for more data.
    let token_pieces: Vec<_> = pieces
        .iter()
        .filter(|(_, p)| p.starts_with(b"data: {"))
        .collect();
    assert_eq!(
        token_pieces.len(),
        6,
        "events were merged or split: {pieces:?}"
    );
    let mut delays = Vec::new();
    for (i, (at, _)) in token_pieces.iter().enumerate() {
        let (sent_at, next_sent_at) = (sent[i], sent[i + 1]);
        assert!(
            *at < next_sent_at,
            "event {i} arrived {:?} after it was sent, {:?} after the next one was",
            at.saturating_duration_since(sent_at),
            at.saturating_duration_since(next_sent_at)
        );
        delays.push(at.saturating_duration_since(sent_at));
    }
    eprintln!("events passed through in {delays:?}");
}

#[test]
fn upstream_dying_mid_stream_ends_with_an_error_event_not_done() {
    let up = Scripted::start(|s, _req| {
        upstream::sse_head(s);
        upstream::chunk(s, upstream::chat_role_event().as_bytes());
        upstream::chunk(s, upstream::chat_event("Hello").as_bytes());
        // Half an event, then the connection dies.
        upstream::chunk(s, b"data: {\"choices\":[{\"delta\":{\"content\":\"wor");
        let _ = s.shutdown(std::net::Shutdown::Both);
    });
    let proxy = Llamatap::start(&up.url(), &[]);
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", CHAT).unwrap();
    assert_eq!(r.head.status, 200);
    let body = r.read_all().unwrap();
    assert!(
        r.clean_end,
        "the stream must end properly after the error event"
    );
    let text = String::from_utf8_lossy(&body);
    assert!(text.starts_with(&upstream::chat_role_event()), "{text}");
    assert!(!text.contains("[DONE]"), "{text}");
    let events = http::sse_data(&body);
    let last: serde_json::Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert_eq!(last["error"]["type"], "upstream_error", "{text}");
    assert!(last["error"]["message"]
        .as_str()
        .unwrap()
        .contains("closed"));
    assert!(last["error"]["code"].is_string());
    let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
        metric_sum(
            m,
            "llamatap_requests_total",
            &["outcome=\"upstream_error\""],
        ) >= 1.0
    });
    assert_eq!(
        metric_sum(
            &m,
            "llamatap_requests_total",
            &["outcome=\"upstream_error\""]
        ),
        1.0
    );
    // The proxy is healthy afterwards.
    let (code, _) = http::get(&proxy.admin(), "/healthz").unwrap();
    assert_eq!(code, 200);
}

#[test]
fn in_band_error_event_passes_through_and_counts_as_upstream_error() {
    let up = Scripted::start(|s, _req| {
        upstream::sse_head(s);
        upstream::chunk(s, upstream::chat_event("Hi").as_bytes());
        upstream::chunk(
            s,
            b"data: {\"error\":{\"code\":500,\"message\":\"boom\",\"type\":\"server_error\"}}\n\n",
        );
        upstream::end_chunks(s);
    });
    let proxy = Llamatap::start(&up.url(), &[]);
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", CHAT).unwrap();
    let body = r.read_all().unwrap();
    assert!(String::from_utf8_lossy(&body).ends_with("\"boom\",\"type\":\"server_error\"}}\n\n"));
    let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
        metric_sum(
            m,
            "llamatap_requests_total",
            &["outcome=\"upstream_error\""],
        ) >= 1.0
    });
    assert_eq!(
        metric_sum(
            &m,
            "llamatap_requests_total",
            &["outcome=\"upstream_error\""]
        ),
        1.0
    );
}

#[test]
fn malformed_and_non_sse_bytes_pass_untouched() {
    let garbage: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
    let g = garbage.clone();
    let up = Scripted::start(move |s, _req| {
        upstream::sse_head(s);
        upstream::chunk(s, b"data: {not json\n\n");
        upstream::chunk(s, &g);
        upstream::chunk(s, b"\r\r\n\n:::\n\nevent: x\ndata\n\n");
        upstream::end_chunks(s);
    });
    let proxy = Llamatap::start(&up.url(), &["--threads", "1"]);
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", CHAT).unwrap();
    let body = r.read_all().unwrap();
    let mut expected = b"data: {not json\n\n".to_vec();
    expected.extend_from_slice(&garbage);
    expected.extend_from_slice(b"\r\r\n\n:::\n\nevent: x\ndata\n\n");
    assert_eq!(body, expected);
}

#[test]
fn oversized_event_is_skipped_by_the_reader_but_forwarded() {
    let big = format!("data: {{\"content\":\"{}\"}}\n\n", "x".repeat(3000));
    let b = big.clone();
    let up = Scripted::start(move |s, _req| {
        upstream::sse_head(s);
        upstream::chunk(s, b.as_bytes());
        upstream::chunk(s, upstream::chat_event("after").as_bytes());
        upstream::end_chunks(s);
    });
    let cfg = common::temp_config("oversize", "[telemetry]\nmax_event_bytes = 1024\n");
    let proxy = Llamatap::start(&up.url(), &["--config", cfg.to_str().unwrap()]);
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", CHAT).unwrap();
    let body = r.read_all().unwrap();
    assert!(body.starts_with(big.as_bytes()));
    assert!(String::from_utf8_lossy(&body).contains("after"));
    // (A scrape reads one family after another, so it may catch a request
    // recorded in one and not yet in the next: wait for both.)
    let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
        metric_sum(m, "llamatap_sse_events_skipped_total", &[]) >= 1.0
            && metric_sum(
                m,
                "llamatap_stage_duration_seconds_count",
                &["stage=\"ttft\""],
            ) >= 1.0
    });
    assert_eq!(
        metric_sum(&m, "llamatap_sse_events_skipped_total", &[]),
        1.0
    );
    // The event after the skipped one was still seen: a first token was recorded.
    assert_eq!(
        metric_sum(
            &m,
            "llamatap_stage_duration_seconds_count",
            &["stage=\"ttft\""]
        ),
        1.0,
        "{m}"
    );
}

#[test]
fn refused_upstream_gives_502_in_openai_shape() {
    let dead = format!("http://127.0.0.1:{}", common::free_port());
    let proxy = Llamatap::start(&dead, &[]);
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", CHAT).unwrap();
    assert_eq!(r.head.status, 502);
    assert!(r
        .head
        .header("content-type")
        .unwrap()
        .contains("application/json"));
    let v: serde_json::Value = serde_json::from_slice(&r.read_all().unwrap()).unwrap();
    assert_eq!(v["error"]["type"], "upstream_error");
    assert_eq!(v["error"]["code"], "upstream_unreachable");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("cannot connect"));
    let (code, _) = http::get(&proxy.admin(), "/readyz").unwrap();
    assert_eq!(code, 503);
}

#[test]
fn stalled_upstream_gives_504_after_the_configured_timeout() {
    // Silent until llamatap gives up (a minute at most).
    let up = Scripted::start(|s, _req| {
        upstream::wait_closed(s, Duration::from_secs(60));
    });
    let cfg = common::temp_config("timeout", "[upstream_timeouts]\nread_seconds = 1\n");
    let proxy = Llamatap::start(&up.url(), &["--config", cfg.to_str().unwrap()]);
    let start = Instant::now();
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", CHAT).unwrap();
    assert_eq!(r.head.status, 504);
    // After the 1 s timeout, long before the upstream's minute.
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(1) && waited < Duration::from_secs(20),
        "504 after {waited:?}"
    );
    let v: serde_json::Value = serde_json::from_slice(&r.read_all().unwrap()).unwrap();
    assert_eq!(v["error"]["code"], "upstream_timeout");
}

#[test]
fn a_stream_silent_mid_body_ends_with_a_timeout_event_and_a_slow_one_does_not() {
    // `read_seconds` bounds each silence between body reads, not the whole
    // answer: events 600 ms apart pass a 1 s timeout; a stream that then
    // falls silent gets an error event after about a second.
    let up = Scripted::start(|s, _req| {
        upstream::sse_head(s);
        for word in ["One", " two", " three", " four."] {
            upstream::chunk(s, upstream::chat_event(word).as_bytes());
            std::thread::sleep(Duration::from_millis(600));
        }
        upstream::wait_closed(s, Duration::from_secs(60));
    });
    let cfg = common::temp_config("midstall", "[upstream_timeouts]\nread_seconds = 1\n");
    let proxy = Llamatap::start(&up.url(), &["--config", cfg.to_str().unwrap()]);
    let start = Instant::now();
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", CHAT).unwrap();
    assert_eq!(r.head.status, 200);
    let body = String::from_utf8(r.read_all().unwrap()).unwrap();
    let waited = start.elapsed();
    for word in ["One", " two", " three", " four."] {
        assert!(
            body.contains(&format!("\"content\":\"{word}\"")),
            "{word}: {body}"
        );
    }
    assert!(body.contains("upstream_timeout"), "{body}");
    assert!(!body.contains("[DONE]"), "{body}");
    // Four events 600 ms apart, then one silent second; far below a minute.
    assert!(
        waited >= Duration::from_millis(2400) && waited < Duration::from_secs(20),
        "ended after {waited:?}"
    );
}

#[test]
fn upstream_error_responses_pass_through_untouched() {
    let up = Scripted::start(|s, _req| {
        upstream::json(
            s,
            400,
            r#"{"error":{"code":400,"message":"the request exceeds the available context size","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":2048}}"#,
        );
    });
    let proxy = Llamatap::start(&up.url(), &[]);
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", CHAT).unwrap();
    assert_eq!(r.head.status, 400);
    let body = r.read_all().unwrap();
    assert_eq!(
        String::from_utf8(body).unwrap(),
        r#"{"error":{"code":400,"message":"the request exceeds the available context size","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":2048}}"#
    );
}

#[test]
fn content_encoding_passes_untouched_both_ways() {
    // Bytes that only look like gzip: llamatap must neither decode nor encode.
    let gz: &'static [u8] = b"\x1f\x8b\x08\x00not-really-gzip\x00\xff";
    let up = Scripted::start(move |s, req| {
        let seen = req.header("accept-encoding").unwrap_or("").to_string();
        if req.path == "/encoded" {
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nX-Seen-Accept-Encoding: {seen}\r\nContent-Length: {}\r\n\r\n",
                gz.len()
            );
            let _ = s.write_all(head.as_bytes());
            let _ = s.write_all(gz);
        } else {
            upstream::json(s, 200, &format!("{{\"seen\":\"{seen}\"}}"));
        }
    });
    let proxy = Llamatap::start(&up.url(), &[]);
    let accept = [("Accept-Encoding", "gzip, br")];
    let mut r = http::send(&proxy.addr(), "GET", "/encoded", &accept, b"").unwrap();
    assert_eq!(r.head.header("content-encoding"), Some("gzip"));
    assert_eq!(r.head.header("x-seen-accept-encoding"), Some("gzip, br"));
    assert_eq!(r.read_all().unwrap(), gz);
    // A plain answer to a client that accepts gzip stays plain.
    let mut r = http::send(&proxy.addr(), "GET", "/plain", &accept, b"").unwrap();
    assert_eq!(r.head.header("content-encoding"), None);
    assert_eq!(r.read_all().unwrap(), b"{\"seen\":\"gzip, br\"}");
}

#[test]
fn requests_pass_unchanged_including_a_10_mb_body() {
    let up = Scripted::start(|s, req| {
        let digest = format!(
            "{{\"method\":\"{}\",\"path\":\"{}\",\"len\":{},\"sum\":{},\"x\":\"{}\"}}",
            req.method,
            req.path,
            req.body.len(),
            req.body.iter().map(|b| *b as u64).sum::<u64>(),
            req.header("x-custom").unwrap_or("")
        );
        upstream::json(s, 200, &digest);
    });
    let proxy = Llamatap::start(&up.url(), &[]);
    let body: Vec<u8> = (0..10 * 1024 * 1024)
        .map(|i| b'a' + (i % 26) as u8)
        .collect();
    let sum: u64 = body.iter().map(|b| *b as u64).sum();
    let mut r = http::send(
        &proxy.addr(),
        "POST",
        "/v1/embeddings?x=1&y=%20z",
        &[("X-Custom", "kept"), ("Content-Type", "text/plain")],
        &body,
    )
    .unwrap();
    assert_eq!(r.head.status, 200);
    let v: serde_json::Value = serde_json::from_slice(&r.read_all().unwrap()).unwrap();
    assert_eq!(v["path"], "/v1/embeddings?x=1&y=%20z");
    assert_eq!(v["len"], body.len());
    assert_eq!(v["sum"], sum);
    assert_eq!(v["x"], "kept");
    // Methods other than POST pass too.
    for method in ["GET", "PUT", "DELETE", "PATCH", "OPTIONS"] {
        let mut r =
            http::send(&proxy.addr(), method, "/slots?fail_on_no_slot=1", &[], b"").unwrap();
        let v: serde_json::Value = serde_json::from_slice(&r.read_all().unwrap()).unwrap();
        assert_eq!(v["method"], method);
        assert_eq!(v["path"], "/slots?fail_on_no_slot=1");
    }
}

/// Client hang-up → how fast the upstream socket sees EOF, at each phase.
fn hangup_close_delay(phase: &str) -> Duration {
    let closed: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let reached = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (c, r) = (closed.clone(), reached.clone());
    let p = phase.to_string();
    let up = Scripted::start(move |s, _req| {
        match p.as_str() {
            "before_headers" => {}
            "prefill" => upstream::sse_head(s),
            _ => {
                upstream::sse_head(s);
                upstream::chunk(s, upstream::chat_event("Hello").as_bytes());
            }
        }
        r.store(true, std::sync::atomic::Ordering::SeqCst);
        *c.lock().unwrap() = upstream::wait_closed(s, Duration::from_secs(60));
    });
    let proxy = Llamatap::start(&up.url(), &[]);
    let conn: Box<dyn std::any::Any> = if phase == "before_headers" {
        Box::new(
            http::send_only(
                &proxy.addr(),
                "POST",
                "/v1/chat/completions",
                CHAT.as_bytes(),
            )
            .unwrap(),
        )
    } else {
        let mut r = http::post(&proxy.addr(), "/v1/chat/completions", CHAT).unwrap();
        if phase == "decode" {
            r.read_until(b"Hello").unwrap();
        }
        Box::new(r)
    };
    // The request is upstream, in the phase under test.
    assert!(
        wait_until(Duration::from_secs(30), || reached
            .load(std::sync::atomic::Ordering::SeqCst)),
        "the request never reached the upstream"
    );
    let hung_up = Instant::now();
    drop(conn);
    wait_until(Duration::from_secs(30), || closed.lock().unwrap().is_some());
    let at = closed
        .lock()
        .unwrap()
        .expect("upstream connection never closed");
    let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
        metric_sum(m, "llamatap_cancellations_total", &[]) >= 1.0
    });
    let expected_phase = format!("phase=\"{phase}\"");
    assert_eq!(
        metric_sum(&m, "llamatap_cancellations_total", &[&expected_phase]),
        1.0,
        "{m}"
    );
    assert_eq!(metric_sum(&m, "llamatap_inflight_requests", &[]), 0.0);
    assert_eq!(metric_sum(&m, "llamatap_inflight_streams", &[]), 0.0);
    at.saturating_duration_since(hung_up)
}

#[test]
fn hangup_before_headers_closes_upstream_at_once() {
    // A non-streaming request still generating: no response headers yet.
    let d = hangup_close_delay("before_headers");
    assert!(
        d < Duration::from_millis(100),
        "upstream closed {d:?} after the hang-up"
    );
}

#[test]
fn hangup_during_prefill_closes_upstream_at_once() {
    let d = hangup_close_delay("prefill");
    assert!(
        d < Duration::from_millis(100),
        "upstream closed {d:?} after the hang-up"
    );
}

#[test]
fn hangup_mid_stream_closes_upstream_at_once() {
    let d = hangup_close_delay("decode");
    assert!(
        d < Duration::from_millis(100),
        "upstream closed {d:?} after the hang-up"
    );
}

#[test]
fn random_model_names_do_not_add_series() {
    let up = Scripted::start(|s, req| {
        if req.path == "/health" {
            upstream::json(s, 200, r#"{"status":"ok"}"#);
        } else if req.path == "/v1/models" {
            upstream::json(
                s,
                200,
                r#"{"object":"list","data":[{"id":"tiny.gguf","object":"model"}]}"#,
            );
        } else {
            upstream::json(
                s,
                200,
                r#"{"choices":[{"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#,
            );
        }
    });
    let proxy = Llamatap::start(&up.url(), &[]);
    let count_series = |m: &str| m.lines().filter(|l| !l.starts_with('#')).count();
    let served = |m: &str| {
        let upstream = format!("upstream=\"{}\"", up.addr);
        common::proxy::metric_series(
            m,
            "llamatap_upstream_models",
            &["model=\"tiny.gguf\"", &upstream],
        ) == Some(1.0)
    };
    let before = proxy.wait_metrics(Duration::from_secs(30), served);
    assert!(
        served(&before),
        "the upstream's model list was never read\n{before}"
    );
    for i in 0..300 {
        let body = format!(r#"{{"model":"random-{i}-{}","messages":[]}}"#, i * 7919);
        let mut r = http::post(&proxy.addr(), "/v1/chat/completions", &body).unwrap();
        r.read_all().unwrap();
    }
    let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
        metric_sum(
            m,
            "llamatap_requests_total",
            &["route=\"chat_completions\""],
        ) >= 300.0
    });
    assert!(
        !m.contains("random-"),
        "a client-chosen model name became a label"
    );
    assert_eq!(
        metric_sum(
            &m,
            "llamatap_requests_total",
            &["model=\"other\"", "route=\"chat_completions\""]
        ),
        300.0
    );
    // Every series a chat request can touch exists from the start: 300
    // requests under unknown names add none.
    assert_eq!(
        count_series(&m),
        count_series(&before),
        "series were added\nbefore:\n{before}\nafter:\n{m}"
    );
}

#[test]
fn sigterm_drains_an_inflight_stream_then_exits() {
    // The stream holds after its first event until the test lets it go on.
    let go = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let g = go.clone();
    let up = Scripted::start(move |s, _req| {
        upstream::sse_head(s);
        upstream::chunk(s, upstream::chat_event("t0 ").as_bytes());
        wait_until(Duration::from_secs(20), || {
            g.load(std::sync::atomic::Ordering::SeqCst)
        });
        for i in 1..10 {
            upstream::chunk(s, upstream::chat_event(&format!("t{i} ")).as_bytes());
            std::thread::sleep(Duration::from_millis(100));
        }
        upstream::chunk(s, b"data: [DONE]\n\n");
        upstream::end_chunks(s);
    });
    let mut proxy = Llamatap::start(&up.url(), &["--grace-period-seconds", "30"]);
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", CHAT).unwrap();
    r.read_until(b"t0").unwrap();
    let admin = format!("127.0.0.1:{}", proxy.admin_port);
    assert!(wait_until(Duration::from_secs(5), || {
        http::get(&admin, "/readyz").is_ok_and(|(status, _)| status == 200)
    }));
    let start = Instant::now();
    proxy.term();
    // The admin listener stops accepting too: a readiness probe fails while
    // the stream drains.
    assert!(
        wait_until(Duration::from_secs(5), || http::get(&admin, "/readyz")
            .is_err()),
        "/readyz still answered after SIGTERM"
    );
    assert!(
        proxy.child.try_wait().unwrap().is_none(),
        "exited with a stream in flight"
    );
    go.store(true, std::sync::atomic::Ordering::SeqCst);
    let rest = r.read_all().unwrap();
    assert!(r.clean_end);
    assert!(String::from_utf8_lossy(&rest).contains("[DONE]"));
    let status = proxy
        .wait_exit(Duration::from_secs(40))
        .expect("did not exit");
    assert!(status.success());
    // Exited soon after the stream (about 1 s) ended, not after the 30 s
    // grace period.
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn api_keys_are_checked_before_the_upstream_and_replaced_upstream() {
    let up = Scripted::start(|s, req| {
        let auth = req.header("authorization").unwrap_or("none").to_string();
        upstream::json(s, 200, &format!("{{\"auth\":\"{auth}\"}}"));
    });
    let proxy = Llamatap::start_env(
        &up.url(),
        &[],
        &[
            ("LLAMATAP_API_KEYS", "client-key-1,client-key-2"),
            ("LLAMATAP_UPSTREAM_API_KEY", "upstream-secret"),
        ],
    );
    let seen_before = up.requests.lock().unwrap().len();
    for auth in [
        None,
        Some("Bearer wrong-key-0"),
        Some("Basic client-key-1"),
        Some("Bearer client-key-1x"),
    ] {
        let headers: Vec<(&str, &str)> =
            auth.map(|a| vec![("Authorization", a)]).unwrap_or_default();
        let mut r = http::send(
            &proxy.addr(),
            "POST",
            "/v1/chat/completions",
            &headers,
            CHAT.as_bytes(),
        )
        .unwrap();
        assert_eq!(r.head.status, 401, "{auth:?}");
        assert_eq!(r.head.header("www-authenticate"), Some("Bearer"));
        let v: serde_json::Value = serde_json::from_slice(&r.read_all().unwrap()).unwrap();
        assert_eq!(v["error"]["code"], "invalid_api_key");
    }
    assert_eq!(
        up.requests.lock().unwrap().len(),
        seen_before,
        "a refused request reached the upstream"
    );
    let mut r = http::send(
        &proxy.addr(),
        "POST",
        "/v1/chat/completions",
        &[("Authorization", "Bearer client-key-2")],
        CHAT.as_bytes(),
    )
    .unwrap();
    assert_eq!(r.head.status, 200);
    let v: serde_json::Value = serde_json::from_slice(&r.read_all().unwrap()).unwrap();
    assert_eq!(
        v["auth"], "Bearer upstream-secret",
        "the upstream key replaces the client's"
    );
    // llama-server's public routes stay public.
    assert_eq!(http::get(&proxy.addr(), "/health").unwrap().0, 200);
    let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
        metric_sum(m, "llamatap_requests_total", &["outcome=\"rejected\""]) >= 4.0
    });
    assert_eq!(
        metric_sum(&m, "llamatap_requests_total", &["outcome=\"rejected\""]),
        4.0
    );
    // Secrets never reach logs.
    assert!(!proxy.stderr().contains("upstream-secret") && !proxy.stderr().contains("client-key"));
}

#[test]
fn oversized_bodies_and_headers_get_413_and_431() {
    let up = Scripted::start(|s, _req| upstream::json(s, 200, "{}"));
    let cfg = common::temp_config(
        "limits",
        "[limits]\nmax_body_bytes = 1000\nmax_header_bytes = 2000\n",
    );
    let proxy = Llamatap::start(&up.url(), &["--config", cfg.to_str().unwrap()]);
    let before = up.requests.lock().unwrap().len();
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", &"x".repeat(1001)).unwrap();
    assert_eq!(r.head.status, 413);
    let v: serde_json::Value = serde_json::from_slice(&r.read_all().unwrap()).unwrap();
    assert_eq!(v["error"]["code"], "request_too_large");
    let big = "y".repeat(3000);
    let mut r = http::send(&proxy.addr(), "GET", "/props", &[("X-Big", &big)], b"").unwrap();
    assert_eq!(r.head.status, 431);
    let v: serde_json::Value = serde_json::from_slice(&r.read_all().unwrap()).unwrap();
    assert_eq!(v["error"]["code"], "headers_too_large");
    assert_eq!(up.requests.lock().unwrap().len(), before);
    // Within limits passes.
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", &"x".repeat(999)).unwrap();
    assert_eq!(r.head.status, 200);
    r.read_all().unwrap();
}

#[test]
fn hop_by_hop_headers_are_not_forwarded() {
    let up = Scripted::start(|s, req| {
        let names: Vec<String> = req
            .headers
            .iter()
            .map(|(k, _)| k.to_ascii_lowercase())
            .collect();
        upstream::json(s, 200, &serde_json::json!({ "headers": names }).to_string());
    });
    let proxy = Llamatap::start(&up.url(), &[]);
    let mut r = http::send(
        &proxy.addr(),
        "GET",
        "/props",
        &[
            ("Connection", "keep-alive, X-Secret-Hop"),
            ("X-Secret-Hop", "1"),
            ("Keep-Alive", "timeout=5"),
            ("Proxy-Authorization", "x"),
            ("X-End-To-End", "1"),
        ],
        b"",
    )
    .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&r.read_all().unwrap()).unwrap();
    let names: Vec<&str> = v["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap())
        .collect();
    assert!(names.contains(&"x-end-to-end"), "{names:?}");
    for hop in ["x-secret-hop", "keep-alive", "proxy-authorization"] {
        assert!(!names.contains(&hop), "{hop} was forwarded: {names:?}");
    }
}

#[test]
fn streaming_routes_forward_a_chunked_body_unchanged_without_hop_by_hop_headers() {
    // The routes that can stream have a forwarding path of their own: the
    // request must leave it as it leaves Pingora's (body byte for byte,
    // re-framed; hop-by-hop and connection-nominated headers dropped).
    let up = Scripted::start(|s, req| {
        let names: Vec<String> = req
            .headers
            .iter()
            .map(|(k, _)| k.to_ascii_lowercase())
            .collect();
        let digest = serde_json::json!({
            "len": req.body.len(),
            "sum": req.body.iter().map(|b| *b as u64).sum::<u64>(),
            "headers": names,
        });
        upstream::json(s, 200, &digest.to_string());
    });
    let proxy = Llamatap::start(&up.url(), &[]);
    let body: Vec<u8> = (0..300_000).map(|i| b'a' + (i % 26) as u8).collect();
    let sum: u64 = body.iter().map(|b| *b as u64).sum();
    let mut s = std::net::TcpStream::connect(proxy.addr()).unwrap();
    let mut req = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, X-Secret-Hop\r\nX-Secret-Hop: 1\r\nKeep-Alive: timeout=5\r\nProxy-Authorization: x\r\nX-End-To-End: 1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for piece in body.chunks(7_000) {
        req.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        req.extend_from_slice(piece);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    s.write_all(&req).unwrap();
    let mut r = http::Reader::read_head(s).unwrap();
    assert_eq!(r.head.status, 200);
    let v: serde_json::Value = serde_json::from_slice(&r.read_all().unwrap()).unwrap();
    assert_eq!(v["len"], body.len());
    assert_eq!(v["sum"], sum);
    let names: Vec<&str> = v["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap())
        .collect();
    assert!(names.contains(&"x-end-to-end"), "{names:?}");
    for hop in ["x-secret-hop", "keep-alive", "proxy-authorization"] {
        assert!(!names.contains(&hop), "{hop} was forwarded: {names:?}");
    }
    let reqs = up.requests.lock().unwrap().clone();
    assert_eq!(reqs[0].header("connection"), Some("close"));
}

/// A real llama-server stream of each format (`crates/llamatap-wire/tests/fixtures/sse/`), with
/// the route that answers in it.
const FORMAT_FIXTURES: &[(&str, &str, &str)] = &[
    (
        "/v1/chat/completions",
        "chat_completions",
        "openai_chat.txt",
    ),
    ("/v1/completions", "completions", "openai_completion.txt"),
    ("/completion", "completion", "native_completion.txt"),
    ("/v1/messages", "messages", "anthropic_messages.txt"),
    ("/v1/responses", "responses", "openai_responses.txt"),
];

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/crates/llamatap-wire/tests/fixtures/sse/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The fixture without its last event (`[DONE]`, the native `stop: true`
/// event, `message_stop`, `response.completed`).
fn without_terminal_event(stream: &str) -> String {
    let events: Vec<&str> = stream.split_inclusive("\n\n").collect();
    events[..events.len() - 1].concat()
}

#[test]
fn a_stream_ended_without_its_terminal_event_is_truncated() {
    // The upstream ends the chunked body cleanly (`0\r\n\r\n`), so HTTP sees
    // nothing wrong; only the missing terminal event tells the answer was cut.
    let up = Scripted::start(|s, req| {
        let (_, _, name) = FORMAT_FIXTURES
            .iter()
            .find(|(path, _, _)| *path == req.path)
            .unwrap();
        let whole = fixture(name);
        let body = if req.header("x-test-cut").is_some() {
            without_terminal_event(&whole)
        } else {
            whole
        };
        upstream::sse_head(s);
        for event in body.split_inclusive("\n\n") {
            upstream::chunk(s, event.as_bytes());
        }
        upstream::end_chunks(s);
    });
    let (otlp_url, spans) = common::otlp::http_receiver();
    let proxy = Llamatap::start(
        &up.url(),
        &["--otlp-endpoint", &otlp_url, "--otlp-protocol", "http"],
    );
    let body = r#"{"model":"tiny.gguf","stream":true}"#.as_bytes();
    for (path, route, name) in FORMAT_FIXTURES {
        for cut in [false, true] {
            let headers: &[(&str, &str)] = if cut { &[("X-Test-Cut", "1")] } else { &[] };
            let mut r = http::send(&proxy.addr(), "POST", path, headers, body).unwrap();
            assert_eq!(r.head.status, 200);
            let got = r.read_all().unwrap();
            assert!(r.clean_end, "{path}");
            let sent = if cut {
                without_terminal_event(&fixture(name))
            } else {
                fixture(name)
            };
            // Byte-exact both ways: llamatap adds nothing, not even an error event.
            assert_eq!(String::from_utf8(got).unwrap(), sent, "{path} cut={cut}");
        }
        let m = proxy.wait_metrics(Duration::from_secs(5), |m| {
            metric_sum(
                m,
                "llamatap_requests_total",
                &[&format!("route=\"{route}\"")],
            ) >= 2.0
        });
        let count = |outcome: &str| {
            metric_sum(
                &m,
                "llamatap_requests_total",
                &[
                    &format!("route=\"{route}\""),
                    &format!("outcome=\"{outcome}\""),
                ],
            )
        };
        assert_eq!(count("ok"), 1.0, "{path}: the whole stream is ok\n{m}");
        assert_eq!(
            count("upstream_error"),
            1.0,
            "{path}: the cut stream is an upstream error\n{m}"
        );
    }
    let n = 2 * FORMAT_FIXTURES.len();
    let got = spans.wait(2 * n, Duration::from_secs(10));
    let servers: Vec<_> = got.iter().filter(|s| s.kind == 2).collect();
    assert_eq!(servers.len(), n);
    for (path, route, _) in FORMAT_FIXTURES {
        let mut types: Vec<Option<String>> = servers
            .iter()
            .filter(|s| common::otlp::attr_str(s, "llamatap.route").as_deref() == Some(route))
            .map(|s| common::otlp::attr_str(s, "error.type"))
            .collect();
        types.sort();
        assert_eq!(
            types,
            [None, Some("upstream_truncated".to_string())],
            "{path}"
        );
    }
}

/// Starts llamatap with tracing to a real OTLP receiver.
fn traced_proxy(upstream: &str) -> (Llamatap, common::otlp::Received) {
    let (url, received) = common::otlp::http_receiver();
    let proxy = Llamatap::start(
        upstream,
        &["--otlp-endpoint", &url, "--otlp-protocol", "http"],
    );
    (proxy, received)
}

/// The SERVER span of the only request that carried `path`, once exported.
fn server_span(
    received: &common::otlp::Received,
    path: &str,
    nth: usize,
) -> opentelemetry_proto::tonic::trace::v1::Span {
    let start = Instant::now();
    loop {
        let spans: Vec<_> = received
            .wait(0, Duration::ZERO)
            .into_iter()
            .filter(|s| {
                common::otlp::attr_str(s, "url.path").as_deref() == Some(path)
                    && common::otlp::attr_str(s, "llamatap.outcome").is_some()
            })
            .collect();
        if spans.len() > nth {
            return spans[nth].clone();
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "no SERVER span #{nth} for {path}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The POST bodies the upstream read, in order.
fn bodies(up: &Scripted) -> Vec<String> {
    up.requests
        .lock()
        .unwrap()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect()
}

#[test]
fn a_post_the_upstream_read_whole_is_never_sent_twice() {
    // The upstream reads the second POST whole (llama-server would now be
    // working on it), then resets the connection before any response byte.
    // The POST reached llama-server: sending it again would run it twice.
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    let up = Scripted::start_conn(move |mut s, log| {
        while next_request(&mut s, log).is_some() {
            if count.fetch_add(1, Ordering::SeqCst) == 1 {
                upstream::reset(s);
                return;
            }
            upstream::json(&mut s, 200, r#"{"ok":true}"#);
        }
    });
    let (proxy, received) = traced_proxy(&up.url());
    let first = r#"{"model":"tiny.gguf","input":"first"}"#;
    let second = r#"{"model":"tiny.gguf","input":"second"}"#;
    let mut r = http::post(&proxy.addr(), "/v1/embeddings", first).unwrap();
    assert_eq!(r.head.status, 200);
    r.read_all().unwrap();
    let mut r = http::post(&proxy.addr(), "/v1/embeddings", second).unwrap();
    assert_eq!(r.head.status, 502, "the reset must reach the client");
    assert!(r
        .head
        .header("content-type")
        .unwrap()
        .contains("application/json"));
    let v: serde_json::Value = serde_json::from_slice(&r.read_all().unwrap()).unwrap();
    assert_eq!(v["error"]["type"], "upstream_error");
    assert_eq!(v["error"]["code"], "upstream_disconnected");
    assert_eq!(bodies(&up), [first, second], "the POST was sent twice");
    let m = proxy.wait_metrics(Duration::from_secs(5), |m| {
        metric_sum(
            m,
            "llamatap_requests_total",
            &["outcome=\"upstream_error\""],
        ) >= 1.0
    });
    assert_eq!(
        metric_sum(
            &m,
            "llamatap_requests_total",
            &["outcome=\"upstream_error\""]
        ),
        1.0,
        "{m}"
    );
    let span = server_span(&received, "/v1/embeddings", 1);
    assert_eq!(
        common::otlp::attr_str(&span, "error.type").as_deref(),
        Some("upstream_disconnected")
    );
}

#[test]
fn every_request_goes_out_on_a_connection_of_its_own() {
    // An upstream that keeps its connections open and resets any second
    // request on one (as a kept-alive connection races llama-server's close
    // after a stream): no request is ever sent on a used connection, so
    // none fails, whatever its route or method.
    let reused = Arc::new(AtomicUsize::new(0));
    let count = reused.clone();
    let up = Scripted::start_conn(move |mut s, log| {
        let mut served = 0;
        while let Some(req) = next_request(&mut s, log) {
            if served > 0 {
                count.fetch_add(1, Ordering::SeqCst);
                upstream::reset(s);
                return;
            }
            served += 1;
            match req.path.as_str() {
                "/v1/chat/completions" => {
                    upstream::sse_head(&mut s);
                    upstream::chunk(&mut s, &chat_stream_bytes(&["Hi", "."]));
                    upstream::end_chunks(&mut s);
                }
                _ => upstream::json(&mut s, 200, r#"{"ok":true}"#),
            }
        }
    });
    let proxy = Llamatap::start(&up.url(), &[]);
    for round in 0..3 {
        for path in ["/v1/embeddings", "/tokenize", "/v1/chat/completions"] {
            let mut r = http::post(&proxy.addr(), path, CHAT).unwrap();
            assert_eq!(r.head.status, 200, "{path}, round {round}");
            r.read_all().unwrap();
        }
        let (status, _) = http::get(&proxy.addr(), "/props").unwrap();
        assert_eq!(status, 200, "GET /props, round {round}");
    }
    assert_eq!(
        reused.load(Ordering::SeqCst),
        0,
        "a request went out on a used connection"
    );
    let reqs = up.requests.lock().unwrap().clone();
    assert_eq!(reqs.len(), 12);
    assert!(
        reqs.iter().all(|r| r.header("connection") == Some("close")),
        "every request asks for Connection: close"
    );
}

#[test]
fn a_connection_that_carried_a_stream_is_never_reused() {
    // llama-server closes its connection after every streamed answer, a
    // moment after the last byte and without `Connection: close`. This
    // upstream keeps it open instead and counts what the proxy sends on it
    // afterwards: with pooling, the next request would race that close.
    let late = Arc::new(Mutex::new(0u32));
    let pooled = Arc::new(Mutex::new(0u32));
    let (l, p) = (late.clone(), pooled.clone());
    let up = Scripted::start_conn(move |mut s, log| {
        let mut streamed = false;
        let mut served = 0;
        while let Some(req) = next_request(&mut s, log) {
            if streamed {
                // llama-server would be closing now, reading the request away.
                *l.lock().unwrap() += 1;
                return;
            }
            if served > 0 {
                *p.lock().unwrap() += 1;
            }
            served += 1;
            if req.path == "/v1/embeddings" {
                upstream::json(&mut s, 200, r#"{"ok":true}"#);
            } else {
                streamed = true;
                upstream::sse_head(&mut s);
                upstream::chunk(&mut s, &chat_stream_bytes(&["Hi", "."]));
                upstream::end_chunks(&mut s);
            }
        }
    });
    let proxy = Llamatap::start(&up.url(), &[]);
    for path in [
        "/v1/chat/completions",
        "/v1/chat/completions",
        "/completion",
        "/v1/messages",
    ] {
        let mut r = http::post(&proxy.addr(), path, CHAT).unwrap();
        assert_eq!(r.head.status, 200, "{path}");
        r.read_all().unwrap();
    }
    assert_eq!(
        *late.lock().unwrap(),
        0,
        "a request went out on a used connection"
    );
    let reqs = up.requests.lock().unwrap().clone();
    assert_eq!(reqs.len(), 4);
    assert!(reqs.iter().all(|r| r.header("connection") == Some("close")));
    // Nor is a connection that carried a route that cannot stream.
    for _ in 0..2 {
        let mut r = http::post(&proxy.addr(), "/v1/embeddings", "{}").unwrap();
        assert_eq!(r.head.status, 200);
        r.read_all().unwrap();
    }
    assert_eq!(
        *pooled.lock().unwrap(),
        0,
        "a connection was used for a second request"
    );
}

#[test]
fn a_stream_goes_out_on_a_connection_made_before_it_and_never_on_a_stale_one() {
    // After a stream, the next one should not wait for a TCP connect: it
    // takes a connection made in advance, which never carried a request. A
    // connection older than `pool_idle_ms` is never used (llama-server closes
    // one that sent nothing after 5 s).
    type Conns = Arc<Mutex<Vec<(Instant, Option<Instant>)>>>;
    let conns: Conns = Arc::new(Mutex::new(Vec::new()));
    let c = conns.clone();
    let up = Scripted::start_conn(move |mut s, log| {
        let i = {
            let mut g = c.lock().unwrap();
            g.push((Instant::now(), None));
            g.len() - 1
        };
        if next_request(&mut s, log).is_some() {
            c.lock().unwrap()[i].1 = Some(Instant::now());
            upstream::sse_head(&mut s);
            upstream::chunk(&mut s, &chat_stream_bytes(&["Hi", "."]));
            upstream::end_chunks(&mut s);
        }
    });
    let cfg = common::temp_config("spare", "[upstream_timeouts]\npool_idle_ms = 2000\n");
    let proxy = Llamatap::start(&up.url(), &["--config", cfg.to_str().unwrap()]);
    let stream = || {
        let mut r = http::post(&proxy.addr(), "/v1/chat/completions", CHAT).unwrap();
        assert_eq!(r.head.status, 200);
        r.read_all().unwrap();
    };
    // Connections that never carried a request, made after `t`.
    let idle_since = |t: Instant| {
        conns
            .lock()
            .unwrap()
            .iter()
            .filter(|(made, req)| *made > t && req.is_none())
            .count()
    };
    // When the connection that carried the first request sent after `t` was
    // accepted here.
    let carried_after = |t: Instant| {
        conns
            .lock()
            .unwrap()
            .iter()
            .rfind(|(_, req)| req.is_some_and(|r| r > t))
            .map(|(made, _)| *made)
            .unwrap()
    };
    // The upstream sees a spare accepted a moment before the proxy has put it
    // in its slot, so on a loaded machine a stream sent right then may still
    // connect itself: one of three rounds must find the spare, and a proxy
    // that makes none fails all three.
    let mut used = Vec::new();
    let mut sent = Instant::now();
    for _ in 0..3 {
        let t0 = Instant::now();
        stream();
        assert!(
            wait_until(Duration::from_secs(5), || idle_since(t0) >= 1),
            "no connection made in advance"
        );
        sent = Instant::now();
        stream();
        let spare = carried_after(sent) < sent;
        used.push(spare);
        if spare {
            break;
        }
    }
    assert!(
        used.contains(&true),
        "the second stream waited for a new connection in every round: {used:?}"
    );
    // Past `pool_idle_ms`, the one made in advance is left unused.
    assert!(wait_until(Duration::from_secs(5), || idle_since(sent) >= 1));
    std::thread::sleep(Duration::from_millis(2300));
    let sent = Instant::now();
    stream();
    assert!(
        carried_after(sent) > sent,
        "a connection older than pool_idle_ms was used"
    );
}

#[test]
fn an_unresolvable_upstream_host_gives_502_and_the_proxy_lives_on() {
    // The start-up lookup fails; requests must not resolve (or panic) on the
    // proxy's thread: they get 502 until the background watcher resolves it.
    let mut proxy = Llamatap::start("http://nonexistent.invalid:8081", &[]);
    for _ in 0..3 {
        let mut r = http::post(&proxy.addr(), "/v1/chat/completions", CHAT).unwrap();
        assert_eq!(r.head.status, 502);
        assert!(r
            .head
            .header("content-type")
            .unwrap()
            .contains("application/json"));
        let v: serde_json::Value = serde_json::from_slice(&r.read_all().unwrap()).unwrap();
        assert_eq!(v["error"]["type"], "upstream_error");
        assert_eq!(v["error"]["code"], "upstream_unresolved");
        // A plain reason for the client; the host name is for the log.
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("does not resolve"), "{message}");
        assert!(!message.contains("nonexistent.invalid"), "{message}");
    }
    assert!(
        proxy.stderr().contains("nonexistent.invalid"),
        "{}",
        proxy.stderr()
    );
    assert!(proxy.child.try_wait().unwrap().is_none(), "llamatap died");
    assert!(!proxy.stderr().contains("panicked"), "{}", proxy.stderr());
    assert_eq!(http::get(&proxy.admin(), "/readyz").unwrap().0, 503);
    let m = proxy.wait_metrics(Duration::from_secs(5), |m| {
        metric_sum(
            m,
            "llamatap_requests_total",
            &["outcome=\"upstream_error\""],
        ) >= 3.0
    });
    assert_eq!(
        metric_sum(
            &m,
            "llamatap_requests_total",
            &["outcome=\"upstream_error\""]
        ),
        3.0,
        "{m}"
    );
}

#[test]
fn a_host_name_upstream_is_reached_at_its_resolved_address() {
    let up = Scripted::start(|s, _req| upstream::json(s, 200, r#"{"ok":true}"#));
    let port = up.addr.rsplit(':').next().unwrap();
    let proxy = Llamatap::start(&format!("http://localhost:{port}"), &[]);
    let mut r = http::post(&proxy.addr(), "/v1/embeddings", "{}").unwrap();
    assert_eq!(r.head.status, 200);
    r.read_all().unwrap();
    let start = Instant::now();
    while http::get(&proxy.admin(), "/readyz").unwrap().0 != 200 {
        assert!(start.elapsed() < Duration::from_secs(10), "never ready");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_oversized_body_gets_the_same_413_whatever_its_framing() {
    // Content-Length over the limit is refused before the upstream; a chunked
    // body is counted as it streams. Same answer, same outcome, both traced.
    let up = Scripted::start(|s, _req| upstream::json(s, 200, "{}"));
    let cfg = common::temp_config("limits413", "[limits]\nmax_body_bytes = 1000\n");
    let (url, received) = common::otlp::http_receiver();
    let proxy = Llamatap::start(
        &up.url(),
        &[
            "--config",
            cfg.to_str().unwrap(),
            "--otlp-endpoint",
            &url,
            "--otlp-protocol",
            "http",
        ],
    );
    let body = format!(r#"{{"model":"tiny.gguf","prompt":"{}"}}"#, "x".repeat(1500));
    let by_length = http::post(&proxy.addr(), "/v1/completions", &body).unwrap();
    let mut s = std::net::TcpStream::connect(proxy.addr()).unwrap();
    let mut chunked = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for piece in body.as_bytes().chunks(400) {
        chunked.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        chunked.extend_from_slice(piece);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    s.write_all(&chunked).unwrap();
    let by_chunks = http::Reader::read_head(s).unwrap();
    let mut answers = Vec::new();
    for (framing, mut r) in [("content-length", by_length), ("chunked", by_chunks)] {
        assert_eq!(r.head.status, 413, "{framing}");
        assert!(
            r.head
                .header("content-type")
                .is_some_and(|v| v.contains("application/json")),
            "{framing}"
        );
        assert!(
            r.head.header("traceresponse").is_some(),
            "{framing}: no traceresponse"
        );
        let v: serde_json::Value = serde_json::from_slice(&r.read_all().unwrap()).unwrap();
        assert_eq!(v["error"]["code"], "request_too_large", "{framing}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{framing}");
        answers.push(v);
    }
    assert_eq!(answers[0], answers[1], "the two 413 bodies differ");
    assert!(
        up.requests.lock().unwrap().is_empty(),
        "the upstream received a whole oversized request"
    );
    let m = proxy.wait_metrics(Duration::from_secs(5), |m| {
        metric_sum(m, "llamatap_requests_total", &[]) >= 2.0
    });
    assert_eq!(
        metric_sum(&m, "llamatap_requests_total", &["outcome=\"rejected\""]),
        2.0,
        "{m}"
    );
    for nth in 0..2 {
        let span = server_span(&received, "/v1/completions", nth);
        assert_eq!(
            common::otlp::attr_str(&span, "error.type").as_deref(),
            Some("request_too_large")
        );
        assert_eq!(
            common::otlp::attr_str(&span, "llamatap.outcome").as_deref(),
            Some("rejected")
        );
    }
}

/// With several upstreams llamatap reads the body before it chooses one, so
/// it must answer `Expect: 100-continue` itself: a client that waits for the
/// `100` before sending its body (curl does, for a second, above 1 MiB or
/// when asked) would otherwise stall. The upstream is not asked again.
#[test]
fn fleet_answers_expect_100_continue_before_reading_the_body() {
    let answer = |s: &mut std::net::TcpStream, _req: &upstream::ReqInfo| {
        upstream::json(s, 200, r#"{"choices":[]}"#);
    };
    let (a, b) = (Scripted::start(answer), Scripted::start(answer));
    let proxy = Llamatap::start_fleet(&[&a.url(), &b.url()], &[]);
    let body = r#"{"model":"tiny.gguf","messages":[{"role":"user","content":"hi"}]}"#;
    let mut s = std::net::TcpStream::connect(proxy.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nExpect: 100-continue\r\n\r\n",
        body.len()
    )
    .unwrap();
    // A strict client: no body before the interim answer.
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        use std::io::Read;
        let n = s.read(&mut byte).expect("no 100 Continue within 10 s");
        assert_eq!(n, 1, "connection closed before 100 Continue");
        got.push(byte[0]);
    }
    assert!(
        got.starts_with(b"HTTP/1.1 100"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    s.write_all(body.as_bytes()).unwrap();
    let mut rest = Vec::new();
    while !String::from_utf8_lossy(&rest).contains("choices") {
        use std::io::Read;
        let n = s.read(&mut byte).unwrap();
        assert_eq!(n, 1, "closed: {}", String::from_utf8_lossy(&rest));
        rest.push(byte[0]);
    }
    assert!(
        rest.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&rest)
    );
    let seen: Vec<upstream::ReqInfo> = [
        a.requests.lock().unwrap().clone(),
        b.requests.lock().unwrap().clone(),
    ]
    .concat()
    .into_iter()
    .filter(|r| r.path == "/v1/chat/completions")
    .collect();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].body, body.as_bytes(), "the body passed unchanged");
    assert_eq!(
        seen[0].header("expect"),
        None,
        "the upstream is not asked again"
    );
}

#[test]
fn a_priority_header_naming_no_class_is_refused_with_400() {
    let served = Arc::new(AtomicUsize::new(0));
    let n = served.clone();
    let up = Scripted::start(move |s, req| {
        if req.path.ends_with("/chat/completions") {
            n.fetch_add(1, Ordering::Relaxed);
        }
        upstream::json(
            s,
            200,
            r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}"#,
        );
    });
    let cfg = common::temp_config(
        "priority-header",
        "[queue]\nenabled = true\npriority_header = \"X-Priority\"\nmax_inflight = 1\n",
    );
    let proxy = Llamatap::start(&up.url(), &["--config", cfg.to_str().unwrap()]);
    let body = br#"{"messages":[{"role":"user","content":"hi"}]}"#;
    let send = |value: &str| {
        let mut r = http::send(
            &proxy.addr(),
            "POST",
            "/v1/chat/completions",
            &[("X-Priority", value)],
            body,
        )
        .unwrap();
        let status = r.head.status;
        (
            status,
            String::from_utf8_lossy(&r.read_all().unwrap()).into_owned(),
        )
    };
    let (status, text) = send("urgent");
    assert_eq!(status, 400, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["code"], "invalid_priority", "{text}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("x-priority")
            && message.contains("\"urgent\"")
            && message.contains("batch"),
        "{message}"
    );
    assert_eq!(
        served.load(Ordering::Relaxed),
        0,
        "refused before the upstream"
    );
    for ok in ["batch", " Interactive ", "default"] {
        let (status, text) = send(ok);
        assert_eq!(status, 200, "{ok:?}: {text}");
    }
}

/// A client that stops reading mid-stream: once its socket's buffers are
/// full, llamatap's write to it makes no progress. Past
/// `limits.client_write_seconds` the request ends as a client timeout and
/// the upstream connection closes (llama-server would cancel), where it
/// used to be held for as long as the client kept its socket open.
#[test]
fn a_client_that_stops_reading_is_let_go_and_its_upstream_closed() {
    let closed: Arc<Mutex<Option<Instant>>> = Arc::default();
    let sent = Arc::new(AtomicUsize::new(0));
    let (closed_up, sent_up) = (closed.clone(), sent.clone());
    let up = Scripted::start(move |s, _req| {
        upstream::sse_head(s);
        let event = upstream::chat_event(&"x".repeat(64 * 1024));
        // At most 1 GiB: far more than every buffer between here and a
        // client that reads nothing.
        for _ in 0..16_384 {
            if !upstream::chunk(s, event.as_bytes()) {
                *closed_up.lock().unwrap() = Some(Instant::now());
                return;
            }
            sent_up.fetch_add(1, Ordering::SeqCst);
        }
        upstream::end_chunks(s);
    });
    let cfg = common::temp_config("unread", "[limits]\nclient_write_seconds = 1\n");
    let proxy = Llamatap::start(&up.url(), &["--config", cfg.to_str().unwrap()]);
    // Sends the request and never reads a byte of the answer.
    let client = http::send_only(
        &proxy.addr(),
        "POST",
        "/v1/chat/completions",
        CHAT.as_bytes(),
    )
    .unwrap();
    assert!(
        wait_until(Duration::from_secs(60), || closed.lock().unwrap().is_some()),
        "the upstream connection was still open after {} events were sent to a client that reads nothing",
        sent.load(Ordering::SeqCst)
    );
    let m = proxy.wait_metrics(Duration::from_secs(10), |m| {
        metric_sum(m, "llamatap_requests_total", &["outcome=\"client_hangup\""]) >= 1.0
    });
    assert_eq!(
        metric_sum(
            &m,
            "llamatap_requests_total",
            &["outcome=\"client_hangup\""]
        ),
        1.0
    );
    drop(client);
}
