//! What the stages of a request mean when it does not end properly, and
//! what llamatap does with numbers and names an upstream sends: through the
//! real binary, against a scripted upstream, with a real OTLP receiver.
//!
//! - A stream cut by a hang-up or a dying upstream has no first sentence
//!   unless one was complete before the cut; a properly ended stream without
//!   a sentence terminator gets its text as the first sentence at its end.
//! - Absurd `timings` never cost a request its telemetry.
//! - Model names that change with every `/v1/models` keep `/metrics` bounded.
//! - An exemplar names only a trace whose span the export queue took.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::http;
use common::otlp::{self, Received};
use common::proxy::{metric_sum, Llamatap};
use common::upstream::{self, read_request, Scripted};
use common::wait_until;
use opentelemetry_proto::tonic::trace::v1::Span;

const CHAT: &str =
    r#"{"model":"tiny.gguf","messages":[{"role":"user","content":"hi"}],"stream":true}"#;

/// The trace id in a response's `traceresponse`.
fn trace_id(r: &http::Reader) -> String {
    let tr = r.head.header("traceresponse").expect("traceresponse");
    tr.split('-').nth(1).unwrap().to_string()
}

/// The SERVER span of trace `id`, once exported.
fn server_span(received: &Received, id: &str) -> Span {
    let mut found = None;
    wait_until(Duration::from_secs(15), || {
        found = received
            .wait(0, Duration::ZERO)
            .into_iter()
            .find(|s| s.kind == 2 && otlp::hex(&s.trace_id) == id);
        found.is_some()
    });
    found.unwrap_or_else(|| panic!("no SERVER span for trace {id}"))
}

fn events(s: &Span) -> Vec<String> {
    s.events.iter().map(|e| e.name.clone()).collect()
}

/// The latency page's entry for trace `id`.
fn page_entry(proxy: &Llamatap, id: &str) -> serde_json::Value {
    let (_, body) = http::get(&proxy.admin(), "/latency.json").unwrap();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    v["requests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["trace_id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no latency-page entry for {id}: {v}"))
}

#[test]
fn a_cut_stream_has_no_first_sentence_and_a_whole_one_gets_its_text() {
    // Every case streams two tokens without a sentence end; then the test
    // case decides: the client hangs up, the upstream closes or resets the
    // connection, or the answer ends properly.
    let up = Scripted::start_conn(|mut s, log| {
        let Some(req) = upstream::next_request(&mut s, log) else {
            return;
        };
        upstream::sse_head(&mut s);
        upstream::chunk(&mut s, upstream::chat_role_event().as_bytes());
        upstream::chunk(&mut s, upstream::chat_event("no end").as_bytes());
        upstream::chunk(&mut s, upstream::chat_event(" here").as_bytes());
        match req.header("x-test-case").unwrap_or("") {
            "hangup" => {
                upstream::wait_closed(&mut s, Duration::from_secs(30));
            }
            "close" => {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
            "reset" => upstream::reset(s),
            _ => {
                upstream::chunk(&mut s, upstream::chat_final_event(4, 0, 2).as_bytes());
                upstream::chunk(&mut s, b"data: [DONE]\n\n");
                upstream::end_chunks(&mut s);
            }
        }
    });
    let (url, received) = otlp::http_receiver();
    let proxy = Llamatap::start(
        &up.url(),
        &["--otlp-endpoint", &url, "--otlp-protocol", "http"],
    );
    let send = |case: &str| {
        http::send(
            &proxy.addr(),
            "POST",
            "/v1/chat/completions",
            &[("X-Test-Case", case)],
            CHAT.as_bytes(),
        )
        .unwrap()
    };
    let mut cut = Vec::new();
    for case in ["hangup", "close", "reset"] {
        let mut r = send(case);
        assert_eq!(r.head.status, 200);
        let id = trace_id(&r);
        if case == "hangup" {
            r.read_until(b"here").unwrap();
            drop(r);
        } else {
            let body = r.read_all().unwrap();
            assert!(String::from_utf8_lossy(&body).contains("\"error\""));
        }
        cut.push((case, id));
    }
    let mut r = send("whole");
    let whole = trace_id(&r);
    assert_eq!(http::chat_content(&r.read_all().unwrap()), "no end here");

    let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
        metric_sum(m, "llamatap_requests_total", &[]) >= 4.0
    });
    let count = |stage: &str| {
        metric_sum(
            &m,
            "llamatap_stage_duration_seconds_count",
            &[&format!("stage=\"{stage}\"")],
        )
    };
    assert_eq!(
        metric_sum(
            &m,
            "llamatap_requests_total",
            &["outcome=\"client_hangup\""]
        ),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric_sum(
            &m,
            "llamatap_requests_total",
            &["outcome=\"upstream_error\""]
        ),
        2.0,
        "{m}"
    );
    assert_eq!(count("ttft"), 4.0, "moments before a cut are stages\n{m}");
    assert_eq!(count("first_sentence"), 1.0, "only the whole answer's\n{m}");
    for stage in ["last_token", "e2e"] {
        assert_eq!(count(stage), 1.0, "{stage}: only the whole answer's\n{m}");
    }

    for (case, id) in &cut {
        let span = server_span(&received, id);
        let names = events(&span);
        assert!(
            names.contains(&"first_token".to_string()),
            "{case}: {names:?}"
        );
        assert!(
            !names.contains(&"first_sentence".to_string()),
            "{case}: a cut stream has no first sentence: {names:?}"
        );
        let entry = page_entry(&proxy, id);
        assert!(entry["ttft_ms"].is_number(), "{case}: {entry}");
        assert!(entry["first_sentence_ms"].is_null(), "{case}: {entry}");
    }
    let span = server_span(&received, &whole);
    let sentence = span
        .events
        .iter()
        .find(|e| e.name == "first_sentence")
        .unwrap_or_else(|| panic!("no first_sentence: {:?}", events(&span)));
    let chars = sentence
        .attributes
        .iter()
        .find(|a| a.key == "sentence.chars")
        .and_then(|a| a.value.clone())
        .and_then(|v| v.value);
    assert_eq!(
        chars,
        Some(opentelemetry_proto::tonic::common::v1::any_value::Value::IntValue(11))
    );
    let entry = page_entry(&proxy, &whole);
    assert!(entry["first_sentence_ms"].as_f64().unwrap() >= entry["ttft_ms"].as_f64().unwrap());
}

#[test]
fn absurd_upstream_timings_cost_no_telemetry() {
    // Numbers no llama-server sends, but any upstream may: each request's
    // metrics, span and access-log line must still be written.
    let timings = serde_json::json!({"prompt_n": 1e308, "cache_n": 5, "prompt_ms": 1e30,
        "predicted_n": -3, "predicted_ms": -5.0});
    let big = serde_json::json!({"prompt_n": 4, "prompt_ms": 1e308, "predicted_n": 1e19, "predicted_ms": 1e300});
    let stream_final = format!(
        "data: {}\n\n",
        serde_json::json!({"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"model":"tiny.gguf","timings": timings})
    );
    let whole = serde_json::json!({"choices":[{"message":{"role":"assistant","content":"Hi."},"finish_reason":"stop"}],
        "model":"tiny.gguf","usage":{"prompt_tokens":1e300,"completion_tokens":-1},"timings": big})
    .to_string();
    let up = Scripted::start(move |s, req| {
        if req.header("x-test-case") == Some("json") {
            upstream::json(s, 200, &whole);
            return;
        }
        upstream::sse_head(s);
        upstream::chunk(s, upstream::chat_event("Hi.").as_bytes());
        upstream::chunk(s, stream_final.as_bytes());
        upstream::chunk(s, b"data: [DONE]\n\n");
        upstream::end_chunks(s);
    });
    let log = std::env::temp_dir().join(format!("llamatap-absurd-{}.log", common::free_port()));
    let (url, received) = otlp::http_receiver();
    let proxy = Llamatap::start(
        &up.url(),
        &[
            "--otlp-endpoint",
            &url,
            "--otlp-protocol",
            "http",
            "--access-log",
            log.to_str().unwrap(),
        ],
    );
    for case in ["stream", "json"] {
        let mut r = http::send(
            &proxy.addr(),
            "POST",
            "/v1/chat/completions",
            &[("X-Test-Case", case)],
            CHAT.as_bytes(),
        )
        .unwrap();
        assert_eq!(r.head.status, 200);
        r.read_all().unwrap();
    }
    let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
        metric_sum(
            m,
            "llamatap_stage_duration_seconds_count",
            &["stage=\"e2e\""],
        ) >= 2.0
    });
    assert_eq!(
        metric_sum(&m, "llamatap_requests_total", &["outcome=\"ok\""]),
        2.0,
        "{m}"
    );
    for stage in ["prefill", "decode"] {
        assert_eq!(
            metric_sum(
                &m,
                "llamatap_stage_duration_seconds_count",
                &[&format!("stage=\"{stage}\"")]
            ),
            0.0,
            "an absurd {stage} is dropped\n{m}"
        );
    }
    assert!(
        wait_until(Duration::from_secs(15), || std::fs::read_to_string(&log)
            .is_ok_and(|t| t.lines().count() >= 2)),
        "access log: {:?}",
        std::fs::read_to_string(&log)
    );
    let text = std::fs::read_to_string(&log).unwrap();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["outcome"], "ok", "{line}");
    }
    let spans = received.wait(4, Duration::from_secs(15));
    assert_eq!(spans.iter().filter(|s| s.kind == 2).count(), 2);
    let (code, _) = http::get(&proxy.admin(), "/latency").unwrap();
    assert_eq!(code, 200);
    let _ = std::fs::remove_file(&log);
}

#[test]
fn model_names_that_change_on_every_refresh_keep_metrics_bounded() {
    // A router-mode llama-server or a stream of model swaps: every read of
    // /v1/models names a model never seen before.
    let reads = Arc::new(AtomicUsize::new(0));
    let n = reads.clone();
    let up = Scripted::start_conn(move |mut s: TcpStream, _log| {
        while let Some(req) = read_request(&mut s) {
            match req.path.as_str() {
                "/health" => upstream::json(&mut s, 200, r#"{"status":"ok"}"#),
                "/v1/models" => {
                    let i = n.fetch_add(1, Ordering::SeqCst);
                    let body = format!(
                        r#"{{"object":"list","data":[{{"id":"model-{i:04}","object":"model"}}]}}"#
                    );
                    upstream::json(&mut s, 200, &body);
                }
                _ => upstream::json(&mut s, 404, "{}"),
            }
            if req
                .header("connection")
                .is_some_and(|c| c.eq_ignore_ascii_case("close"))
            {
                break;
            }
        }
        let _ = s.flush();
    });
    let config = common::temp_config("model-swaps", "[models]\nrefresh_seconds = 1\n");
    let proxy = Llamatap::start(&up.url(), &["--config", config.to_str().unwrap()]);
    let labelled = |m: &str, i: usize| m.contains(&format!("model=\"model-{i:04}\""));
    let first = proxy.wait_metrics(Duration::from_secs(30), |m| labelled(m, 0));
    assert!(labelled(&first, 0), "the first name never arrived\n{first}");
    let mut largest = 0;
    let changes = 8;
    for i in 1..=changes {
        let m = proxy.wait_metrics(Duration::from_secs(30), |m| labelled(m, i));
        assert!(labelled(&m, i), "name {i} never arrived\n{m}");
        largest = largest.max(m.len());
        let names: std::collections::BTreeSet<&str> = m
            .lines()
            .filter(|l| l.starts_with("llamatap_stage_duration_seconds_count"))
            .filter_map(|l| l.split("model=\"model-").nth(1))
            .filter_map(|l| l.get(..4))
            .collect();
        assert!(names.len() <= 2, "names held at once: {names:?}");
    }
    assert!(
        largest <= first.len() + first.len() / 20,
        "/metrics grew from {} to {largest} bytes over {changes} name changes",
        first.len()
    );
    let m = proxy.metrics();
    assert!(
        !labelled(&m, 0),
        "the first name's series were never removed"
    );
}

#[test]
fn an_exemplar_names_only_a_trace_the_export_queue_took() {
    let up = Scripted::start(|s, _req| {
        upstream::sse_head(s);
        upstream::chunk(s, upstream::chat_event("Hi.").as_bytes());
        upstream::chunk(s, upstream::chat_final_event(4, 0, 1).as_bytes());
        upstream::chunk(s, b"data: [DONE]\n\n");
        upstream::end_chunks(s);
    });
    // A collector that never answers holds the export thread on its first
    // batch; a queue of two spans then drops nearly every span after the
    // first request's two. Those two always fit, however late the export
    // thread takes the first, so the first request's SERVER span is queued
    // and its exemplar is there to be seen.
    let (url, _) = otlp::black_hole();
    let queue = common::temp_config("queue-of-two", "[telemetry]\nexport_queue_size = 2\n");
    let proxy = Llamatap::start(
        &up.url(),
        &[
            "--otlp-endpoint",
            &url,
            "--otlp-protocol",
            "http",
            "--config",
            queue.to_str().unwrap(),
        ],
    );
    let dropped_count = |m: &str| {
        metric_sum(
            m,
            "llamatap_otel_spans_total",
            &["result=\"dropped_queue_full\""],
        )
    };
    let chat = |proxy: &Llamatap| {
        let mut r = http::post(&proxy.addr(), "/v1/chat/completions", CHAT).unwrap();
        let id = trace_id(&r);
        r.read_all().unwrap();
        id
    };
    // Requests until one has both its spans dropped by the full queue
    // (its spans end, and are counted, before its metrics are recorded).
    let mut n = 0.0;
    let dropped = loop {
        let before = dropped_count(&proxy.metrics());
        let id = chat(&proxy);
        n += 1.0;
        let m = proxy.wait_metrics(Duration::from_secs(10), |m| {
            metric_sum(m, "llamatap_requests_total", &[]) >= n
        });
        if dropped_count(&m) - before == 2.0 {
            break id;
        }
        assert!(
            n < 100.0,
            "the queue never dropped both spans of a request\n{m}"
        );
    };
    let text = proxy.openmetrics();
    assert!(
        text.contains("# {trace_id=\""),
        "no exemplar at all\n{text}"
    );
    assert!(
        !text.contains(&dropped),
        "an exemplar names trace {dropped}, whose spans were dropped\n{text}"
    );
}

/// An upstream that reports `model` in /v1/models and answers chats with a
/// whole JSON body.
fn serving(model: &'static str) -> Scripted {
    Scripted::start_conn(move |mut s: TcpStream, _log| {
        while let Some(req) = read_request(&mut s) {
            match req.path.as_str() {
                "/health" => upstream::json(&mut s, 200, r#"{"status":"ok"}"#),
                "/v1/models" => upstream::json(
                    &mut s,
                    200,
                    &format!(r#"{{"object":"list","data":[{{"id":"{model}"}}]}}"#),
                ),
                "/v1/chat/completions" => upstream::json(
                    &mut s,
                    200,
                    &format!(
                        r#"{{"choices":[{{"message":{{"content":"Hi."}},"finish_reason":"stop"}}],"model":"{model}"}}"#
                    ),
                ),
                _ => upstream::json(&mut s, 404, "{}"),
            }
            if req
                .header("connection")
                .is_some_and(|c| c.eq_ignore_ascii_case("close"))
            {
                break;
            }
        }
    })
}

#[test]
fn the_fleet_says_which_upstream_serves_which_model_and_a_refusal_is_no_upstream_error() {
    let (alpha, beta) = (serving("alpha"), serving("beta"));
    let proxy = Llamatap::start_fleet(&[&alpha.url(), &beta.url()], &[]);
    let served = |m: &str, model: &str, up: &Scripted| {
        let model = format!("model=\"{model}\"");
        let upstream = format!("upstream=\"{}\"", up.addr);
        common::proxy::metric_series(m, "llamatap_upstream_models", &[&model, &upstream])
    };
    let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
        served(m, "alpha", &alpha).is_some() && served(m, "beta", &beta).is_some()
    });
    assert_eq!(served(&m, "alpha", &alpha), Some(1.0), "{m}");
    assert_eq!(served(&m, "beta", &beta), Some(1.0), "{m}");
    assert_eq!(served(&m, "alpha", &beta), None, "{m}");
    assert_eq!(served(&m, "beta", &alpha), None, "{m}");

    // llamatap's own 404 for a model nobody serves is a refusal, not an
    // upstream error, on the latency page too.
    let body = r#"{"model":"gamma","messages":[]}"#;
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", body).unwrap();
    assert_eq!(r.head.status, 404);
    r.read_all().unwrap();
    let mut r = http::post(
        &proxy.addr(),
        "/v1/chat/completions",
        r#"{"model":"alpha","messages":[]}"#,
    )
    .unwrap();
    assert_eq!(r.head.status, 200);
    r.read_all().unwrap();
    proxy.wait_metrics(Duration::from_secs(30), |m| {
        metric_sum(m, "llamatap_requests_total", &[]) >= 2.0
    });
    let (_, page) = http::get(&proxy.admin(), "/latency").unwrap();
    let page = String::from_utf8(page).unwrap();
    let card = |what: &str| {
        let end = page
            .find(&format!("<span>{what}</span>"))
            .unwrap_or_else(|| {
                panic!("no card {what:?}: {page}");
            });
        let start = page[..end].rfind("<b>").unwrap() + 3;
        page[start..end].trim_end_matches("</b>").to_string()
    };
    assert_eq!(card("refused (4xx)"), "1");
    assert_eq!(card("upstream/proxy errors"), "0");
    assert_eq!(card("ok"), "1");
}

#[test]
fn metrics_come_out_in_one_order_and_without_impossible_series() {
    let nobody = format!("http://127.0.0.1:{}", common::free_port());
    let config = common::temp_config("order", "[models]\naliases = [\"a\", \"b\", \"c\"]\n");
    let series = |proxy: &Llamatap| -> Vec<String> {
        proxy
            .metrics()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| !l.starts_with("llamatap_build_info") && !l.contains("upstream="))
            .map(|l| l.rsplit_once(' ').map_or(l, |(k, _)| k).to_string())
            .collect()
    };
    let one = Llamatap::start(&nobody, &["--config", config.to_str().unwrap()]);
    let two = Llamatap::start(&nobody, &["--config", config.to_str().unwrap()]);
    let (a, b) = (series(&one), series(&two));
    assert_eq!(a, b, "two processes list their series in different orders");
    let mut sorted = a.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), a.len());
    assert!(
        !a.iter()
            .any(|l| l.contains("model=\"none\",outcome=\"upstream_error\",route=\"metrics\"")),
        "a series no dashboard reads is pre-created"
    );
    assert!(
        !a.iter()
            .any(|l| l.contains("model=\"a\",outcome=\"rejected\"")),
        "a named model is never refused"
    );
}

/// A client that closes as soon as it has `[DONE]`, before the body's last
/// framing bytes (the OpenAI SDKs do): the answer was whole, so the request
/// is `ok`, not a hang-up. A client that leaves before `[DONE]` is one.
#[test]
fn a_client_closing_right_after_done_got_its_whole_answer() {
    let up = Scripted::start(|s, req| {
        let late_done = String::from_utf8_lossy(&req.body).contains("late");
        upstream::sse_head(s);
        upstream::chunk(s, upstream::chat_event("Hi there.").as_bytes());
        if late_done {
            std::thread::sleep(Duration::from_millis(500));
        }
        upstream::chunk(s, upstream::chat_final_event(4, 0, 2).as_bytes());
        upstream::chunk(s, b"data: [DONE]\n\n");
        // The end of the chunked body comes later than the client waits.
        std::thread::sleep(Duration::from_millis(500));
        upstream::end_chunks(s);
    });
    let proxy = Llamatap::start(&up.url(), &[]);
    let count = |m: &str, outcome: &str| {
        metric_sum(
            m,
            "llamatap_requests_total",
            &[
                &format!("outcome=\"{outcome}\""),
                "route=\"chat_completions\"",
            ],
        )
    };
    for (leave_before_done, outcome) in [(false, "ok"), (true, "client_hangup")] {
        let body = if leave_before_done {
            CHAT.replace("hi", "late")
        } else {
            CHAT.to_string()
        };
        let mut r = http::post(&proxy.addr(), "/v1/chat/completions", &body).unwrap();
        let mut seen = Vec::new();
        let needle: &[u8] = if leave_before_done {
            b"Hi there."
        } else {
            b"[DONE]"
        };
        while !seen.windows(needle.len()).any(|w| w == needle) {
            seen.extend(r.next_piece().unwrap().expect("ended early"));
        }
        assert_eq!(
            leave_before_done,
            !seen.windows(6).any(|w| w == b"[DONE]"),
            "{}",
            String::from_utf8_lossy(&seen)
        );
        drop(r);
        let m = proxy.wait_metrics(Duration::from_secs(10), |m| count(m, outcome) >= 1.0);
        assert_eq!(count(&m, outcome), 1.0, "{m}");
    }
    let m = proxy.metrics();
    assert_eq!((count(&m, "ok"), count(&m, "client_hangup")), (1.0, 1.0));
}
