#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A TTFT objective after a slow spell: the bound, the prediction times the
//! worst recent error, refuses every request, so no new error is measured;
//! ten seconds without one, a request is admitted as a probe, and each
//! probe that comes in fast takes the place of one slow ratio, until
//! requests are admitted again on the bound alone. The same for a member
//! that is only left out while another meets the objective.
//!
//! A scripted llama-server, since a real one cannot be made slow for
//! exactly two answers: each chat answer's first token comes after a
//! delay the test sets, and its `timings` say the prefill took that long.

mod common;

use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::http;
use common::proxy::Llamatap;
use common::upstream::{self, Scripted};
use common::{access_lines, wait_until};
use llamatap_policy::ttft::PROBE_AFTER_S;
use serde_json::Value;

/// A usual answer's first token, ms.
const USUAL_MS: u64 = 100;
/// An answer's first token in the slow spell, ms.
const SLOW_MS: u64 = 400;
/// The objective: within it on a usual answer, not with the spell's error.
const SLO: &str = "250";
/// The warm-up's objective: over the floor, under a usual answer.
const WARM_SLO: &str = "50";

/// A llama-server of two slots whose chat answers' first token comes after
/// `delay` ms; `served` counts its chat answers.
fn llama(delay: Arc<AtomicU64>, served: Arc<AtomicUsize>) -> Scripted {
    Scripted::start_conn(move |mut s: TcpStream, _log| {
        while let Some(req) = upstream::read_request(&mut s) {
            match req.path.as_str() {
                "/health" => upstream::json(&mut s, 200, r#"{"status":"ok"}"#),
                "/slots" => upstream::json(
                    &mut s,
                    200,
                    r#"[{"id":0,"is_processing":false},{"id":1,"is_processing":false}]"#,
                ),
                "/v1/models" => upstream::json(
                    &mut s,
                    200,
                    r#"{"object":"list","data":[{"id":"tiny.gguf","object":"model"}]}"#,
                ),
                "/v1/chat/completions" => {
                    served.fetch_add(1, Ordering::SeqCst);
                    let ms = delay.load(Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(ms));
                    upstream::sse_head(&mut s);
                    upstream::chunk(&mut s, upstream::chat_event("Hi.").as_bytes());
                    let timings = serde_json::json!({"choices":[{"finish_reason":"stop","index":0,"delta":{}}],
                        "created":1,"id":"chatcmpl-test","model":"tiny.gguf","object":"chat.completion.chunk",
                        "timings":{"cache_n":0,"prompt_n":100,"prompt_ms":ms as f64 - 2.0,
                            "predicted_n":2,"predicted_ms":4.0}});
                    upstream::chunk(&mut s, format!("data: {timings}\n\n").as_bytes());
                    upstream::chunk(&mut s, b"data: [DONE]\n\n");
                    upstream::end_chunks(&mut s);
                }
                _ => upstream::json(
                    &mut s,
                    501,
                    r#"{"error":{"code":501,"message":"not here","type":"not_supported_error"}}"#,
                ),
            }
            if req
                .header("connection")
                .is_some_and(|c| c.eq_ignore_ascii_case("close"))
            {
                return;
            }
        }
    })
}

/// Sends a streamed chat request of a prompt no other shares, with an
/// objective when given; its status once the whole answer was read.
fn chat(addr: &str, i: usize, slo: Option<&str>) -> u16 {
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": format!("nonce{i} {}", "tell me of the river stone ".repeat(12))}],
        "max_tokens": 2,
        "stream": true,
    })
    .to_string();
    let headers: Vec<(&str, &str)> = slo.map(|s| ("x-slo-ttft-ms", s)).into_iter().collect();
    let mut r = http::send(
        addr,
        "POST",
        "/v1/chat/completions",
        &headers,
        body.as_bytes(),
    )
    .expect("request");
    r.read_all().expect("the answer");
    r.head.status
}

#[test]
fn after_a_slow_spell_probes_bring_admissions_back() {
    let delay = Arc::new(AtomicU64::new(USUAL_MS));
    let up = llama(delay.clone(), Arc::default());
    let (proxy, log) = Llamatap::start_logged(&up.url(), "ttft-probe", "");
    let addr = proxy.addr();
    let mut i = warm_up(&proxy);
    // The slow spell: two answers four times slower than predicted, then
    // usual ones that bring the prediction back.
    delay.store(SLOW_MS, Ordering::SeqCst);
    for _ in 0..2 {
        i += 1;
        assert_eq!(chat(&addr, i, None), 200);
    }
    delay.store(USUAL_MS, Ordering::SeqCst);
    for _ in 0..8 {
        i += 1;
        assert_eq!(chat(&addr, i, None), 200);
    }
    let last_ratio = Instant::now();
    // Now the bound holds the spell's error: refused at once.
    i += 1;
    assert_eq!(chat(&addr, i, Some(SLO)), 503, "{}", proxy.stderr());
    // Until one is admitted as a probe, ten seconds on.
    let mut refused = 1;
    let mut admitted = Vec::new();
    let back = wait_until(Duration::from_secs(20 * PROBE_AFTER_S as u64), || {
        i += 1;
        match chat(&addr, i, Some(SLO)) {
            200 => admitted.push(last_ratio.elapsed()),
            503 => refused += 1,
            other => panic!("status {other}"),
        }
        // Admitted, and the last one not as a probe.
        let lines = slo_lines(&log);
        lines.len() == admitted.len() && lines.last().is_some_and(|l| l["ttft_probe"] == false)
    });
    // Each line is written as its answer ends, a moment after the client
    // read it.
    wait_until(Duration::from_secs(10), || {
        slo_lines(&log).len() == admitted.len()
    });
    let lines = slo_lines(&log);
    let probes: Vec<&Value> = lines.iter().filter(|l| l["ttft_probe"] == true).collect();
    eprintln!(
        "refused {refused}, admitted at {admitted:.1?} after the spell; probes {}",
        probes.len()
    );
    assert!(back, "admissions never came back: {lines:?}");
    // The first admitted was a probe, no sooner than ten seconds after the
    // last ratio (the proxy counts whole seconds: up to one early, and the
    // ratio may be recorded a moment before the client read its answer).
    assert_eq!(lines[0]["ttft_probe"], true, "{lines:?}");
    assert!(admitted[0] >= Duration::from_secs(u64::from(PROBE_AFTER_S) - 2));
    // One probe a ratio of the spell; more if this machine was so loaded
    // that other answers were that late too.
    assert!((2..=10).contains(&probes.len()), "{lines:?}");
    assert!(refused >= 2, "{refused}");
}

/// Warm-up: an objective over the member's floor (half its 2 ms decode
/// step and few ms of overhead) and under its usual answer is admitted
/// while a bound is unsure, and refused once every member's is sure (the
/// prediction alone is over it, so this is no probe). The requests sent.
fn warm_up(proxy: &Llamatap) -> usize {
    let mut i = 0;
    let sure = wait_until(Duration::from_secs(120), || {
        i += 1;
        chat(&proxy.addr(), i, Some(WARM_SLO)) == 503
    });
    assert!(sure, "never refused after {i} requests: {}", proxy.stderr());
    i
}

/// The access lines of requests admitted with the test's objective.
fn slo_lines(log: &std::path::Path) -> Vec<Value> {
    access_lines(log)
        .into_iter()
        .filter(|l| l["status"] == 200 && l["ttft_slo_ms"] == 250)
        .collect()
}

#[test]
fn a_member_left_out_after_its_slow_spell_is_probed_and_taken_back() {
    let delays = [(); 2].map(|_| Arc::new(AtomicU64::new(USUAL_MS)));
    let served = [(); 2].map(|_| Arc::new(AtomicUsize::new(0)));
    let ups: Vec<Scripted> = (0..2)
        .map(|m| llama(delays[m].clone(), served[m].clone()))
        .collect();
    let urls: Vec<String> = ups.iter().map(Scripted::url).collect();
    let log = std::env::temp_dir().join("llamatap-ttft-probe-left-out.jsonl");
    let _ = std::fs::remove_file(&log);
    let proxy = Llamatap::start_fleet(
        &[&urls[0], &urls[1]],
        &["--access-log", log.to_str().unwrap()],
    );
    let addr = proxy.addr();
    let mut i = warm_up(&proxy);
    // Member 0's slow spell: two of its answers four times slower than
    // predicted, then eight usual ones (the router places each by its
    // prompt, so requests go on until member 0 served them).
    let on_0 = |n: usize, i: &mut usize| {
        let until = served[0].load(Ordering::SeqCst) + n;
        while served[0].load(Ordering::SeqCst) < until {
            *i += 1;
            assert_eq!(chat(&addr, *i, None), 200);
        }
    };
    delays[0].store(SLOW_MS, Ordering::SeqCst);
    on_0(2, &mut i);
    delays[0].store(USUAL_MS, Ordering::SeqCst);
    on_0(8, &mut i);
    let last_ratio = Instant::now();
    // Now member 0 is left out, member 1 meets the objective: every
    // request is admitted, to member 1, until member 0 is probed, and
    // after its probes, taken back on its bound alone.
    let port_0 = urls[0].rsplit(':').next().unwrap().to_string();
    let on_member_0 = |l: &Value| l["upstream"].as_str().is_some_and(|u| u.ends_with(&port_0));
    let mut sent = Vec::new();
    let back = wait_until(Duration::from_secs(20 * PROBE_AFTER_S as u64), || {
        i += 1;
        assert_eq!(chat(&addr, i, Some(SLO)), 200, "{}", proxy.stderr());
        sent.push(last_ratio.elapsed());
        slo_lines(&log)
            .iter()
            .any(|l| on_member_0(l) && l["ttft_probe"] == false)
    });
    wait_until(Duration::from_secs(10), || {
        slo_lines(&log).len() == sent.len()
    });
    let lines = slo_lines(&log);
    let first_0 = lines.iter().position(on_member_0);
    let probes: Vec<usize> = (0..lines.len())
        .filter(|&n| lines[n]["ttft_probe"] == true)
        .collect();
    eprintln!(
        "{} admitted; member 0's first at {:.1?}, probes at {:?}",
        lines.len(),
        first_0.map(|n| sent[n]),
        probes.iter().map(|&n| sent[n]).collect::<Vec<_>>()
    );
    assert!(back, "member 0 never taken back: {lines:?}");
    // Its first request was a probe, no sooner than ten seconds after its
    // last ratio; only member 0 was probed (member 1 met the objective).
    let first_0 = first_0.unwrap();
    assert_eq!(lines[first_0]["ttft_probe"], true, "{lines:?}");
    assert!(sent[first_0] >= Duration::from_secs(u64::from(PROBE_AFTER_S) - 2));
    assert!(probes.iter().all(|&n| on_member_0(&lines[n])), "{lines:?}");
    assert!((2..=10).contains(&probes.len()), "{lines:?}");
    assert!(lines[..first_0].iter().all(|l| !on_member_0(l)));
}
