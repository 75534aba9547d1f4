//! The built-in latency page after real traffic through the real llama-server
//! (the quick start's real model, SmolLM2-135M-Instruct, so that the
//! screenshot shows real answers' timings): bounded to `admin.recent_requests`, one waterfall per request,
//! p50/p95 per stage and model, each trace id (the one the client got in
//! `traceresponse`) linking to the configured Jaeger URL, no external assets.
//! Then headless Chromium (Debian's `chromium`) takes a screenshot into
//! `target/latency-page.png`; with `LLAMATAP_UPDATE_SCREENSHOT=1` it also
//! replaces docs/latency-page.png, the one the manual shows (docs/operations.md).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
// Included by path so that this test needs no line in tests/common/mod.rs.
use common::prometheus as prom;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::http;
use common::llama::LlamaServer;
use common::otlp;
use common::proxy::Llamatap;

const JAEGER: &str = "http://jaeger.example:16686";
const CAPACITY: usize = 14;

fn chat(system: &str, user: &str, stream: bool, max_tokens: u32) -> String {
    common::llama::chat_with_system(system, user, stream, max_tokens, 3)
}

/// The trace id of a `traceresponse` header (`00-{trace}-{span}-{flags}`).
fn trace_id(r: &http::Reader) -> String {
    let tr = r
        .head
        .header("traceresponse")
        .expect("traceresponse header (tracing is on)");
    tr.split('-').nth(1).expect("trace id").to_string()
}

/// Sends one request, reads it all; returns its trace id.
fn send(addr: &str, path: &str, body: &str) -> String {
    let mut r = http::post(addr, path, body).unwrap();
    assert_eq!(r.head.status, 200, "{path}");
    r.read_all().unwrap();
    trace_id(&r)
}

/// Streams until the first visible token, then hangs up; returns the trace id.
fn hang_up(addr: &str, body: &str) -> String {
    let mut r = http::post(addr, "/v1/chat/completions", body).unwrap();
    assert_eq!(r.head.status, 200);
    let id = trace_id(&r);
    let mut seen = Vec::new();
    while http::chat_content(&seen).is_empty() {
        match r.next_piece().unwrap() {
            Some(p) => seen.extend(p),
            None => break,
        }
    }
    drop(r);
    id
}

#[test]
fn latency_page_shows_recent_requests_and_is_screenshotted() {
    let t0 = Instant::now();
    let llama = LlamaServer::start("real", &[]);
    let (otlp_url, _spans) = otlp::http_receiver();
    let config = common::temp_config(
        "latency-page",
        &format!("[admin]\njaeger_url = \"{JAEGER}/\"\nrecent_requests = {CAPACITY}\n"),
    );
    let proxy = Llamatap::start(
        &llama.base_url,
        &[
            "--config",
            config.to_str().unwrap(),
            "--otlp-endpoint",
            &otlp_url,
            "--otlp-protocol",
            "http",
        ],
    );
    let addr = proxy.addr();
    let system = format!(
        "You are a concise assistant. {}",
        llama.prompt_of_tokens(150)
    );

    // 18 LLM requests, one after the other, so the ring keeps the last 14.
    let mut ids = Vec::new();
    for i in 0..18u32 {
        let id = match i % 6 {
            // Streams of different lengths sharing a cacheable system prompt.
            0..=2 => send(
                &addr,
                "/v1/chat/completions",
                &chat(&system, &format!("Story {i}, please."), true, 16 + 12 * i),
            ),
            // Non-streaming chat.
            3 => send(
                &addr,
                "/v1/chat/completions",
                &chat(&system, "Say hello.", false, 32),
            ),
            // A prompt that changes at its very start: no cache reuse.
            4 => send(
                &addr,
                "/v1/chat/completions",
                &chat(&format!("Now: {i}. {system}"), "What time is it?", true, 40),
            ),
            // A client that hangs up mid-stream.
            _ => hang_up(&addr, &chat(&system, "Tell me everything.", true, 400)),
        };
        ids.push(id);
        // Non-LLM routes are not drawn.
        if i % 9 == 0 {
            assert_eq!(http::get(&addr, "/v1/models").unwrap().0, 200);
        }
    }

    // The JSON view: bounded, newest kept.
    let admin = proxy.admin();
    let start = Instant::now();
    let data = loop {
        let (status, body) = http::get(&admin, "/latency.json").unwrap();
        assert_eq!(status, 200);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let items = v["requests"].as_array().unwrap().clone();
        let has_last = items
            .iter()
            .any(|r| r["trace_id"] == ids.last().unwrap().as_str());
        if items.len() == CAPACITY && has_last {
            break items;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "latency.json never held {CAPACITY} requests with the last one: {v}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let kept: Vec<&str> = data
        .iter()
        .map(|r| {
            r["trace_id"]
                .as_str()
                .expect("every request has a trace id")
        })
        .collect();
    for id in &kept {
        assert!(ids.iter().any(|s| s == id), "unknown trace id {id}");
    }
    for old in &ids[..2] {
        assert!(
            !kept.contains(&old.as_str()),
            "oldest request {old} still kept"
        );
    }
    for r in &data {
        assert_eq!(r["model"], llama.model_id.as_str());
        assert!(r["e2e_ms"].as_f64().unwrap() > 0.0);
    }
    assert!(data.iter().any(|r| r["outcome"] == "client_hangup"));
    assert!(data
        .iter()
        .any(|r| r["streamed"] == true && r["first_sentence_ms"].is_number()));
    assert!(data.iter().any(|r| r["streamed"] == false
        && r["prefill_ms"].is_number()
        && r["decode_ms"].is_number()));
    assert!(data.iter().any(|r| r["cached_tokens"].as_u64() > Some(0)));

    // The page.
    let mut r = http::send(&admin, "GET", "/latency", &[("Connection", "close")], b"").unwrap();
    assert_eq!(r.head.status, 200);
    assert_eq!(
        r.head.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let html = String::from_utf8(r.read_all().unwrap()).unwrap();
    // One waterfall per kept request, and each trace id linked to Jaeger.
    assert_eq!(html.matches("<div class=wf").count(), CAPACITY, "{html}");
    for id in &kept {
        assert!(
            html.contains(&format!("href=\"{JAEGER}/trace/{id}\"")),
            "no Jaeger link for {id}"
        );
    }
    // The numbers are the request's own (same rounding as the page).
    for r in &data {
        let end = format!("<td>{:.1}</td>", r["e2e_ms"].as_f64().unwrap());
        assert!(html.contains(&end), "end {end} not on the page");
    }
    // p50 / p95 per stage for the model, with its request count.
    let short = llama.model_id.rsplit('/').next().unwrap();
    assert!(
        html.contains(&format!(
            "<td class=l title=\"{}\">{short}</td><td>{CAPACITY}</td>",
            llama.model_id
        )),
        "no percentile row for {short}"
    );
    assert!(html.contains("p50 / p95 per stage and model"));
    assert!(html.contains("client_hangup"));
    assert!(html.contains("setInterval"), "auto-refresh");
    // Self-contained: no scripts, styles, fonts or images from elsewhere.
    assert!(!html.contains(" src="), "external asset");
    assert!(!html.contains("<link"), "external stylesheet");
    assert!(
        !html.contains("@import") && !html.contains("url("),
        "external CSS asset"
    );
    let foreign = html
        .match_indices("href=\"")
        .map(|(i, _)| &html[i + 6..])
        .filter(|rest| !rest.starts_with(JAEGER))
        .count();
    assert_eq!(foreign, 0, "links other than Jaeger's");
    let traffic = t0.elapsed();

    // The screenshot for the manual.
    let t1 = Instant::now();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let png = root.join("target/latency-page.png");
    std::fs::create_dir_all(png.parent().unwrap()).unwrap();
    prom::chromium_screenshot(&format!("http://{admin}/latency"), &png, 1400, 900);
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(
        prom::png_size(&bytes),
        Some((1400, 900)),
        "not a 1400x900 PNG"
    );
    // A blank or error page compresses to a few kB; this one has text and bars.
    assert!(
        bytes.len() > 40_000,
        "screenshot suspiciously small ({} bytes)",
        bytes.len()
    );
    if std::env::var_os("LLAMATAP_UPDATE_SCREENSHOT").is_some() {
        std::fs::copy(&png, root.join("docs/latency-page.png")).unwrap();
    }
    eprintln!(
        "latency_page: traffic and checks {traffic:?}, screenshot {:?} ({} bytes)",
        t1.elapsed(),
        bytes.len()
    );
}
