//! Telemetry end to end against a scripted upstream with known send times:
//! spans over a real OTLP connection (HTTP and gRPC), their parentage, events
//! and timing, the traceresponse header, and the Prometheus histograms.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::http;
use common::otlp::{self, attr_int, attr_str, hex};
use common::proxy::{assert_model_series_at_zero, metric_sum, Llamatap};
use common::upstream::{self, Scripted};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

fn unix_nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64
}

/// The pause before each token of [`scripted_chat`].
const TOKEN_GAP: Duration = Duration::from_millis(100);

/// Upstream: headers, a role-only event, a reasoning token, then visible tokens
/// [`TOKEN_GAP`] apart; the first sentence is complete at the 3rd visible
/// token, its period and space after a plain word (the 4th's capital letter
/// confirms it, and the event is dated to the 3rd).
fn scripted_chat(
    sent: Arc<Mutex<Vec<(String, SystemTime)>>>,
    seen_traceparent: Arc<Mutex<Option<String>>>,
) -> Scripted {
    Scripted::start(move |s, req| {
        if req.path != "/v1/chat/completions" {
            upstream::json(s, 404, "{}");
            return;
        }
        *seen_traceparent.lock().unwrap() = req.header("traceparent").map(str::to_string);
        upstream::sse_head(s);
        std::thread::sleep(Duration::from_millis(50));
        upstream::chunk(s, upstream::chat_role_event().as_bytes());
        std::thread::sleep(TOKEN_GAP);
        let think = format!(
            "data: {}\n\n",
            serde_json::json!({"choices":[{"index":0,"delta":{"reasoning_content":"hmm"}}],"model":"tiny.gguf","object":"chat.completion.chunk"})
        );
        sent.lock()
            .unwrap()
            .push(("reasoning".into(), SystemTime::now()));
        upstream::chunk(s, think.as_bytes());
        for (i, w) in ["Hello", " there", ". ", "How", " are", " you?"]
            .iter()
            .enumerate()
        {
            std::thread::sleep(TOKEN_GAP);
            sent.lock()
                .unwrap()
                .push((format!("t{i}"), SystemTime::now()));
            upstream::chunk(s, upstream::chat_event(w).as_bytes());
        }
        upstream::chunk(s, upstream::chat_final_event(20, 100, 7).as_bytes());
        upstream::chunk(s, b"data: [DONE]\n\n");
        upstream::end_chunks(s);
    })
}

fn check_trace(protocol: &str) {
    let (url, received) = if protocol == "grpc" {
        otlp::grpc_receiver()
    } else {
        otlp::http_receiver()
    };
    let sent = Arc::new(Mutex::new(Vec::new()));
    let seen_tp = Arc::new(Mutex::new(None));
    let up = scripted_chat(sent.clone(), seen_tp.clone());
    let proxy = Llamatap::start_env(
        &up.url(),
        &["--otlp-endpoint", &url, "--otlp-protocol", protocol],
        &[("OTEL_SERVICE_NAME", "llamatap-test")],
    );
    let traceparent = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let body = r#"{"model":"tiny.gguf","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":64,"temperature":0.5}"#;
    let mut r = http::send(
        &proxy.addr(),
        "POST",
        "/v1/chat/completions",
        &[("traceparent", &traceparent), ("tracestate", "vendor=abc")],
        body.as_bytes(),
    )
    .unwrap();
    let tr = r
        .head
        .header("traceresponse")
        .expect("traceresponse header")
        .to_string();
    let out = r.read_all().unwrap();
    assert_eq!(http::chat_content(&out), "Hello there. How are you?");

    let spans = received.wait(2, Duration::from_secs(30));
    assert_eq!(spans.len(), 2, "expected a SERVER and a CLIENT span");
    let server = spans
        .iter()
        .find(|s| s.kind == SpanKind::Server as i32)
        .unwrap();
    let client = spans
        .iter()
        .find(|s| s.kind == SpanKind::Client as i32)
        .unwrap();
    let service = received.spans.lock().unwrap()[0].0.clone();
    assert_eq!(service, "llamatap-test");

    // Parentage: caller → server → client; the upstream saw the client span.
    assert_eq!(hex(&server.trace_id), CALLER_TRACE);
    assert_eq!(hex(&server.parent_span_id), CALLER_SPAN);
    assert_eq!(client.trace_id, server.trace_id);
    assert_eq!(client.parent_span_id, server.span_id);
    let up_tp = seen_tp.lock().unwrap().clone().unwrap();
    assert_eq!(
        up_tp,
        format!("00-{CALLER_TRACE}-{}-01", hex(&client.span_id))
    );
    assert_eq!(tr, format!("00-{CALLER_TRACE}-{}-01", hex(&server.span_id)));

    assert_eq!(server.name, "chat tiny.gguf");
    assert_eq!(
        attr_str(server, "gen_ai.operation.name").as_deref(),
        Some("chat")
    );
    assert_eq!(
        attr_str(server, "gen_ai.provider.name").as_deref(),
        Some("llama.cpp")
    );
    assert_eq!(
        attr_str(server, "gen_ai.request.model").as_deref(),
        Some("tiny.gguf")
    );
    assert_eq!(
        attr_str(server, "gen_ai.response.model").as_deref(),
        Some("tiny.gguf")
    );
    assert_eq!(attr_int(server, "gen_ai.request.max_tokens"), Some(64));
    assert_eq!(attr_int(server, "gen_ai.usage.input_tokens"), Some(120));
    assert_eq!(
        attr_int(server, "gen_ai.usage.cache_read.input_tokens"),
        Some(100)
    );
    assert_eq!(attr_int(server, "gen_ai.usage.output_tokens"), Some(7));
    assert_eq!(attr_int(server, "llama_cpp.timings.prompt_n"), Some(20));
    assert_eq!(attr_int(server, "http.response.status_code"), Some(200));

    // Events, in order, each stamped less than one token gap after the
    // upstream sent its token (a neighbouring token is a whole gap away).
    let names: Vec<&str> = server.events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "first_token_any",
            "first_token",
            "first_sentence",
            "last_token"
        ],
        "{names:?}"
    );
    let sent = sent.lock().unwrap().clone();
    let at = |name: &str| unix_nanos(sent.iter().find(|(n, _)| n == name).unwrap().1);
    let ev = |name: &str| server.events.iter().find(|e| e.name == name).unwrap();
    let close = |ev_ns: u64, sent_ns: u64, what: &str| {
        let d = ev_ns as i64 - sent_ns as i64;
        assert!(
            (0..TOKEN_GAP.as_nanos() as i64).contains(&d),
            "{what}: event {d} ns after the upstream sent its token ({TOKEN_GAP:?} before the next)"
        );
    };
    close(
        ev("first_token_any").time_unix_nano,
        at("reasoning"),
        "first_token_any",
    );
    close(ev("first_token").time_unix_nano, at("t0"), "first_token");
    close(
        ev("first_sentence").time_unix_nano,
        at("t2"),
        "first_sentence",
    );
    close(ev("last_token").time_unix_nano, at("t5"), "last_token");
    let chars = ev("first_sentence")
        .attributes
        .iter()
        .find(|a| a.key == "sentence.chars")
        .unwrap();
    assert_eq!(
        format!(
            "{:?}",
            chars.value.as_ref().unwrap().value.as_ref().unwrap()
        ),
        "IntValue(12)",
        "\"Hello there.\" is 12 chars; got {chars:?}"
    );
    assert!(server.start_time_unix_nano <= client.start_time_unix_nano);
    assert!(client.end_time_unix_nano <= server.end_time_unix_nano);

    // The same request in the histograms.
    let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
        metric_sum(
            m,
            "llamatap_stage_duration_seconds_count",
            &["stage=\"first_sentence\""],
        ) >= 1.0
    });
    for stage in [
        "upstream_headers",
        "first_token_any",
        "ttft",
        "first_sentence",
        "e2e",
        "prefill",
        "decode",
    ] {
        let needle = format!("stage=\"{stage}\"");
        assert_eq!(
            metric_sum(&m, "llamatap_stage_duration_seconds_count", &[&needle]),
            1.0,
            "{stage}\n{m}"
        );
    }
    assert_eq!(
        metric_sum(&m, "llamatap_tokens_total", &["kind=\"prompt\""]),
        120.0
    );
    assert_eq!(
        metric_sum(&m, "llamatap_tokens_total", &["kind=\"cached\""]),
        100.0
    );
    assert_eq!(
        metric_sum(&m, "llamatap_tokens_total", &["kind=\"completion\""]),
        7.0
    );
    let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
        metric_sum(m, "llamatap_otel_spans_total", &["result=\"exported\""]) >= 2.0
    });
    assert_eq!(
        metric_sum(&m, "llamatap_otel_spans_total", &["result=\"exported\""]),
        2.0
    );
}

#[test]
fn spans_over_otlp_http_continue_the_callers_trace() {
    check_trace("http");
}

#[test]
fn spans_over_otlp_grpc_continue_the_callers_trace() {
    check_trace("grpc");
}

#[test]
fn invalid_traceparent_starts_a_new_trace() {
    let (url, received) = otlp::http_receiver();
    let sent = Arc::new(Mutex::new(Vec::new()));
    let up = scripted_chat(sent, Arc::new(Mutex::new(None)));
    let proxy = Llamatap::start(
        &up.url(),
        &["--otlp-endpoint", &url, "--otlp-protocol", "http"],
    );
    for bad in [
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "garbage",
    ] {
        let mut r = http::send(
            &proxy.addr(),
            "POST",
            "/v1/chat/completions",
            &[("traceparent", bad)],
            b"{}",
        )
        .unwrap();
        assert_eq!(r.head.status, 200);
        r.read_all().unwrap();
    }
    let spans = received.wait(8, Duration::from_secs(30));
    let servers: Vec<_> = spans
        .iter()
        .filter(|s| s.kind == SpanKind::Server as i32)
        .collect();
    assert_eq!(servers.len(), 4);
    for s in servers {
        assert!(
            s.parent_span_id.is_empty(),
            "an invalid traceparent was continued"
        );
        assert_ne!(hex(&s.trace_id), CALLER_TRACE.to_ascii_lowercase());
    }
}

#[test]
fn a_dead_collector_does_not_touch_the_stream() {
    let dead = format!("http://127.0.0.1:{}", common::free_port());
    let sent = Arc::new(Mutex::new(Vec::new()));
    let up = scripted_chat(sent, Arc::new(Mutex::new(None)));
    let proxy = Llamatap::start(&up.url(), &["--otlp-endpoint", &dead]);
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", r#"{"stream":true}"#).unwrap();
    assert_eq!(
        http::chat_content(&r.read_all().unwrap()),
        "Hello there. How are you?"
    );
    let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
        metric_sum(
            m,
            "llamatap_otel_spans_total",
            &["result=\"dropped_export_failed\""],
        ) >= 2.0
    });
    assert_eq!(
        metric_sum(
            &m,
            "llamatap_otel_spans_total",
            &["result=\"dropped_export_failed\""]
        ),
        2.0,
        "{m}"
    );
}

#[test]
fn without_an_endpoint_traceparent_passes_untouched() {
    let seen = Arc::new(Mutex::new(None));
    let up = scripted_chat(Arc::new(Mutex::new(Vec::new())), seen.clone());
    let proxy = Llamatap::start(&up.url(), &[]);
    let tp = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let mut r = http::send(
        &proxy.addr(),
        "POST",
        "/v1/chat/completions",
        &[("traceparent", &tp)],
        b"{}",
    )
    .unwrap();
    assert!(r.head.header("traceresponse").is_none());
    r.read_all().unwrap();
    assert_eq!(seen.lock().unwrap().as_deref(), Some(tp.as_str()));
}

#[test]
fn configured_aliases_have_every_series_at_zero_from_the_start() {
    // No upstream at all: the aliases and the `other`/`none` labels are known
    // from the configuration alone, before any check of /v1/models.
    let nobody = format!("http://127.0.0.1:{}", common::free_port());
    let config = common::temp_config(
        "alias-series",
        "[models]\naliases = [\"voice-assistant\", \"phone/agent:v2\"]\n",
    );
    let proxy = Llamatap::start(&nobody, &["--config", config.to_str().unwrap()]);
    let m = proxy.metrics();
    for name in ["voice-assistant", "phone/agent:v2", "other", "none"] {
        assert_model_series_at_zero(&m, name);
    }
}
