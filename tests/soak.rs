#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A bounded soak run: moderate mixed load for a set time (default 30 min)
//! through llamatap against a scripted upstream, with client hang-ups and
//! upstream failures mixed in; checks that nothing but the injected errors
//! happened and that memory stays flat. Not part of the normal run:
//!
//!   LLAMATAP_SOAK_SECS=1800 cargo test --release --test soak -- --ignored --nocapture
//!
//! Figures go to docs/reliability.md.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::http;
use common::proxy::{metric_sum, rss_kib, Llamatap};
use common::upstream::{self, Scripted};

#[test]
#[ignore = "long: run with --ignored (see the module docs)"]
fn soak() {
    let secs: u64 = std::env::var("LLAMATAP_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1800);
    let up = Scripted::start(|s, req| {
        let body = String::from_utf8_lossy(&req.body).to_string();
        if body.contains("\"die\"") {
            upstream::sse_head(s);
            upstream::chunk(s, upstream::chat_event("Hello").as_bytes());
            let _ = s.shutdown(std::net::Shutdown::Both);
            return;
        }
        if body.contains("\"stream\":false") {
            upstream::json(
                s,
                200,
                r#"{"choices":[{"message":{"content":"Hi."},"finish_reason":"stop"}],"model":"tiny.gguf","timings":{"prompt_n":5,"prompt_ms":1.0,"predicted_n":2,"predicted_ms":2.0,"cache_n":0}}"#,
            );
            return;
        }
        upstream::sse_head(s);
        upstream::chunk(s, upstream::chat_role_event().as_bytes());
        for w in ["Hello", " there", ". ", "How", " are", " you", "?"] {
            std::thread::sleep(Duration::from_millis(20));
            if !upstream::chunk(s, upstream::chat_event(w).as_bytes()) {
                return;
            }
        }
        upstream::chunk(s, upstream::chat_final_event(10, 5, 7).as_bytes());
        upstream::chunk(s, b"data: [DONE]\n\n");
        upstream::end_chunks(s);
    });
    let proxy = Llamatap::start(&up.url(), &[]);
    let pid = proxy.child.id();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let (ok, hangups, injected, unexpected) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let workers: Vec<_> = (0..16)
        .map(|w| {
            let (addr, ok, hangups, injected, unexpected) = (
                proxy.addr(),
                ok.clone(),
                hangups.clone(),
                injected.clone(),
                unexpected.clone(),
            );
            std::thread::spawn(move || {
                let mut i: u64 = w;
                while Instant::now() < deadline {
                    i += 16;
                    match i % 10 {
                        0 => {
                            // Hang up mid-stream.
                            let mut r =
                                http::post(&addr, "/v1/chat/completions", r#"{"stream":true}"#)
                                    .unwrap();
                            let _ = r.read_until(b"Hello");
                            hangups.fetch_add(1, Ordering::Relaxed);
                        }
                        1 => {
                            let mut r = http::post(
                                &addr,
                                "/v1/chat/completions",
                                r#"{"stream":true,"x":"die"}"#,
                            )
                            .unwrap();
                            let body = r.read_all().unwrap();
                            let text = String::from_utf8_lossy(&body);
                            if text.contains("upstream_error")
                                && !text.contains("[DONE]")
                                && r.clean_end
                            {
                                injected.fetch_add(1, Ordering::Relaxed);
                            } else {
                                unexpected.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        2 | 3 => {
                            let mut r =
                                http::post(&addr, "/v1/chat/completions", r#"{"stream":false}"#)
                                    .unwrap();
                            let good = r.head.status == 200 && r.read_all().is_ok();
                            (if good { &ok } else { &unexpected }).fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {
                            let mut r =
                                http::post(&addr, "/v1/chat/completions", r#"{"stream":true}"#)
                                    .unwrap();
                            let body = r.read_all().unwrap_or_default();
                            let good = r.head.status == 200
                                && http::chat_content(&body) == "Hello there. How are you?";
                            (if good { &ok } else { &unexpected }).fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect();
    let start = Instant::now();
    let mut samples = Vec::new();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_secs((secs / 30).clamp(1, 60)));
        samples.push((start.elapsed().as_secs(), rss_kib(pid)));
        eprintln!(
            "t={}s rss={} KiB ok={} hangups={} injected={} unexpected={}",
            start.elapsed().as_secs(),
            rss_kib(pid),
            ok.load(Ordering::Relaxed),
            hangups.load(Ordering::Relaxed),
            injected.load(Ordering::Relaxed),
            unexpected.load(Ordering::Relaxed)
        );
    }
    for w in workers {
        w.join().unwrap();
    }
    // Every request is recorded (a client can see its answer end just before
    // llamatap records it).
    let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
        metric_sum(m, "llamatap_inflight_requests", &[]) == 0.0
            && metric_sum(
                m,
                "llamatap_requests_total",
                &["outcome=\"upstream_error\""],
            ) >= injected.load(Ordering::Relaxed) as f64
    });
    let total = ok.load(Ordering::Relaxed)
        + hangups.load(Ordering::Relaxed)
        + injected.load(Ordering::Relaxed);
    let half = samples.len() / 2;
    let (mid, end) = (samples[half].1, samples.last().unwrap().1);
    eprintln!(
        "soak {secs}s: {total} requests ({} ok, {} hang-ups, {} injected upstream deaths, {} unexpected); RSS {} KiB at the middle, {end} KiB at the end; metrics: ok={} client_hangup={} upstream_error={}",
        ok.load(Ordering::Relaxed),
        hangups.load(Ordering::Relaxed),
        injected.load(Ordering::Relaxed),
        unexpected.load(Ordering::Relaxed),
        mid,
        metric_sum(&m, "llamatap_requests_total", &["outcome=\"ok\""]),
        metric_sum(&m, "llamatap_requests_total", &["outcome=\"client_hangup\""]),
        metric_sum(&m, "llamatap_requests_total", &["outcome=\"upstream_error\""]),
    );
    assert_eq!(unexpected.load(Ordering::Relaxed), 0);
    assert_eq!(
        metric_sum(
            &m,
            "llamatap_requests_total",
            &["outcome=\"upstream_error\""]
        ),
        injected.load(Ordering::Relaxed) as f64
    );
    assert_eq!(metric_sum(&m, "llamatap_inflight_requests", &[]), 0.0);
    assert!(
        end <= mid + mid / 20,
        "memory grew in the second half: {samples:?}"
    );
}
