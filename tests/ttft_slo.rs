#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The TTFT prediction and objective on two real llama-servers (the medium
//! model: a prefill of hundreds of tokens takes a measurable part of a
//! second): `x-llamatap-predicted-ttft-ms` after warm-up, within a factor
//! of the client's own TTFT on a steady workload; an unattainable
//! `x-slo-ttft-ms` refused at once (503 `ttft_slo_unattainable`), an
//! attainable one served; the metrics; and `ttft_slo_ms` config errors.
//!
//! The client's clock measures TTFT (send to the first event with content)
//! and arrival to refusal (send to the response head); the figures are
//! printed (`--nocapture`).

mod common;

use std::time::{Duration, Instant};

use common::fleet::{serial, start_servers, upstream_up, wait_for};
use common::http;
use common::proxy::{metric_sum, Llamatap};
use common::temp_config;
use serde_json::Value;

/// One streamed chat request as the client saw it.
struct Seen {
    status: u16,
    predicted: Option<u64>,
    retry_after: Option<String>,
    /// Send to the response head.
    head: Duration,
    /// Send to the first event carrying text.
    ttft: Option<Duration>,
    body: String,
}

fn chat(addr: &str, prompt: &str, slo: Option<&str>) -> Seen {
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 4,
        "stream": true,
        "temperature": 0,
    })
    .to_string();
    let mut headers = vec![];
    if let Some(s) = slo {
        headers.push(("x-slo-ttft-ms", s));
    }
    let sent = Instant::now();
    let mut r = http::send(
        addr,
        "POST",
        "/v1/chat/completions",
        &headers,
        body.as_bytes(),
    )
    .expect("request");
    let head = sent.elapsed();
    let mut seen = Seen {
        status: r.head.status,
        predicted: r
            .head
            .header("x-llamatap-predicted-ttft-ms")
            .map(|v| v.parse().expect("an integer header")),
        retry_after: r.head.header("retry-after").map(str::to_string),
        head,
        ttft: None,
        body: String::new(),
    };
    let mut raw = Vec::new();
    while let Ok(Some(piece)) = r.next_piece() {
        raw.extend_from_slice(&piece);
        if seen.ttft.is_none() && seen.status == 200 {
            let text = String::from_utf8_lossy(&raw);
            let started = http::sse_data(text.as_bytes()).iter().any(|d| {
                serde_json::from_str::<Value>(d).is_ok_and(|v| {
                    let delta = &v["choices"][0]["delta"];
                    ["content", "reasoning_content"]
                        .iter()
                        .any(|k| delta[k].as_str().is_some_and(|s| !s.is_empty()))
                })
            });
            if started {
                seen.ttft = Some(sent.elapsed());
            }
        }
    }
    seen.body = String::from_utf8_lossy(&raw).into_owned();
    seen
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn predictions_after_warm_up_and_objectives_refused_or_served() {
    let _one = serial();
    let servers = start_servers(2, "medium", &[]);
    let urls: Vec<&str> = servers.iter().map(|s| s.base_url.as_str()).collect();
    let proxy = Llamatap::start_fleet(&urls, &["--routing-policy", "least_busy"]);
    let up = wait_for(Duration::from_secs(15), || {
        let m = proxy.metrics();
        servers.iter().all(|s| upstream_up(&m, s) == Some(1.0))
    });
    assert!(up.is_some(), "upstreams never up: {}", proxy.stderr());
    let addr = proxy.addr();
    // About 500 tokens, made unique per request by its first word, so that
    // no prompt reuses another's cache.
    let base = servers[0].prompt_of_tokens(500);
    let prompt = |i: usize| format!("nonce{i} {base}");
    let mut i = 0;

    // Warm-up: an objective of 1 ms is admitted while the predictor is
    // unsure (no data, low confidence) and refused once it is sure.
    let mut refusal = None;
    let mut admitted_unsure = 0;
    while i < 60 && refusal.is_none() {
        let s = chat(&addr, &prompt(i), Some("1"));
        i += 1;
        match s.status {
            200 => {
                admitted_unsure += 1;
            }
            503 => refusal = Some(s),
            other => panic!("status {other}: {}", s.body),
        }
    }
    let refusal = refusal
        .unwrap_or_else(|| panic!("no refusal after {i} requests; stderr:\n{}", proxy.stderr()));
    assert!(
        admitted_unsure >= 4,
        "refused before four answers were learned"
    );
    let v: Value = serde_json::from_str(&refusal.body).unwrap();
    assert_eq!(
        v["error"]["code"], "ttft_slo_unattainable",
        "{}",
        refusal.body
    );
    let message = v["error"]["message"].as_str().unwrap();
    let predicted = refusal.predicted.expect("the prediction in a header");
    assert!(predicted > 1);
    assert!(message.contains(&format!("{predicted} ms")), "{message}");
    assert!(refusal
        .retry_after
        .is_some_and(|r| r.parse::<u64>().unwrap() >= 1));

    // Refusals come at once: measure a few, sure now.
    let mut refusals = Vec::new();
    for _ in 0..10 {
        let s = chat(&addr, &prompt(i), Some("1"));
        i += 1;
        assert_eq!(s.status, 503, "{}", s.body);
        refusals.push(s.head.as_secs_f64() * 1000.0);
    }
    let worst = refusals.iter().copied().fold(0.0, f64::max);
    eprintln!(
        "refusal, send to head: median {:.2} ms, worst {worst:.2} ms (after {admitted_unsure} admitted while unsure)",
        median(refusals.clone())
    );
    assert!(worst < 100.0, "a refusal took {worst:.1} ms: {refusals:?}");

    // A steady workload: one request at a time; the header against the
    // client's TTFT.
    let mut ratios = Vec::new();
    for _ in 0..12 {
        let s = chat(&addr, &prompt(i), None);
        i += 1;
        assert_eq!(s.status, 200, "{}", s.body);
        let p = s.predicted.expect("a prediction after warm-up");
        let t = s.ttft.expect("a first token").as_secs_f64() * 1000.0;
        eprintln!("predicted {p} ms, measured {t:.0} ms");
        ratios.push(t / p as f64);
    }
    let m = median(ratios.clone());
    eprintln!("measured / predicted: median {m:.2}, all {ratios:.2?}");
    assert!(
        (0.5..=2.0).contains(&m),
        "median ratio {m:.2}: {ratios:.2?}"
    );
    assert!(
        ratios.iter().all(|r| (0.25..=4.0).contains(r)),
        "{ratios:.2?}"
    );

    // An attainable objective is served, with its prediction.
    let s = chat(&addr, &prompt(i), Some("60000"));
    i += 1;
    assert_eq!(s.status, 200, "{}", s.body);
    assert!(s.predicted.is_some());
    // A malformed one is refused as the client's error.
    let s = chat(&addr, &prompt(i), Some("soon"));
    assert_eq!(s.status, 400, "{}", s.body);
    assert!(s.body.contains("invalid_ttft_slo"), "{}", s.body);

    let metrics = proxy.metrics();
    assert!(metric_sum(&metrics, "llamatap_ttft_prediction_ratio_count", &[]) >= 12.0);
    assert!(metric_sum(&metrics, "llamatap_ttft_slo_refusals_total", &[]) >= 11.0);
}

#[test]
fn ttft_slo_ms_out_of_range_is_a_one_line_config_error() {
    for (name, toml) in [
        (
            "key",
            "upstream = \"http://127.0.0.1:9\"\n[[auth.keys]]\nname = \"a\"\nkey = \"key-aaaaaaaa\"\nttft_slo_ms = 0\n",
        ),
        (
            "class",
            "upstream = \"http://127.0.0.1:9\"\n[queue]\nenabled = true\n[queue.classes.batch]\nttft_slo_ms = 600001\n",
        ),
    ] {
        let file = temp_config(&format!("slo-{name}"), toml);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_llamatap"))
            .args(["--check-config", file.to_str().unwrap()])
            .env_remove("LLAMATAP_CONFIG")
            .env_remove("LLAMATAP_UPSTREAM")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("ttft_slo_ms"), "{err}");
    }
    let ok = temp_config(
        "slo-ok",
        "upstream = \"http://127.0.0.1:9\"\n[[auth.keys]]\nname = \"a\"\nkey = \"key-aaaaaaaa\"\nttft_slo_ms = 300\n[queue.classes.interactive]\nttft_slo_ms = 250\n",
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_llamatap"))
        .args(["--check-config", ok.to_str().unwrap()])
        .env_remove("LLAMATAP_CONFIG")
        .env_remove("LLAMATAP_UPSTREAM")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
