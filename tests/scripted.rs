//! The proxy against a scripted upstream: what a real llama-server cannot be
//! made to do on cue (byte cuts, drips, deaths, garbage, stalls, refusals),
//! and exact timing of the upstream close after a client hang-up.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::http;
use common::proxy::{metric_sum, Llamatap};
use common::upstream::{self, Scripted};
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
    let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
        metric_sum(m, "llamatap_sse_events_skipped_total", &[]) >= 1.0
    });
    assert_eq!(
        metric_sum(&m, "llamatap_sse_events_skipped_total", &[]),
        1.0
    );
    // The event after the skipped one was still seen: a first token was recorded.
    assert!(
        metric_sum(
            &m,
            "llamatap_stage_duration_seconds_count",
            &["stage=\"ttft\""]
        ) >= 1.0
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
    let before = proxy.wait_metrics(Duration::from_secs(30), |m| {
        m.contains("llamatap_upstream_models{model=\"tiny.gguf\"} 1")
    });
    assert!(
        before.contains("llamatap_upstream_models{model=\"tiny.gguf\"} 1"),
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
    let up = Scripted::start(|s, _req| {
        upstream::sse_head(s);
        for i in 0..10 {
            upstream::chunk(s, upstream::chat_event(&format!("t{i} ")).as_bytes());
            std::thread::sleep(Duration::from_millis(100));
        }
        upstream::chunk(s, b"data: [DONE]\n\n");
        upstream::end_chunks(s);
    });
    let mut proxy = Llamatap::start(&up.url(), &["--grace-period-seconds", "30"]);
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", CHAT).unwrap();
    r.read_until(b"t0").unwrap();
    let start = Instant::now();
    proxy.term();
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
