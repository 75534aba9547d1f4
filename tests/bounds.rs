#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Hostile sizes end to end: every string a client or the upstream controls
//! (path, method, model names, response id, finish reasons, error messages)
//! reaches spans and the latency page bounded, and an oversized request
//! target is refused with 431 before it is forwarded, logged or queued.

mod common;

use std::time::Duration;

use common::http;
use common::otlp::{self, attr_str};
use common::upstream::{self, Scripted};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::Span;

/// What a shortened string ends with.
const MARKER: &str = "…";
/// Longest path, error message, or any other string in a span.
const MAX_TEXT: usize = 1024;
/// Longest method, model name, response id or finish reason.
const MAX_NAME: usize = 256;
/// Most finish reasons kept.
const MAX_REASONS: usize = 16;

/// Every string in a span, with where it was found.
fn strings(span: &Span) -> Vec<(String, String)> {
    let mut out = vec![("name".to_string(), span.name.clone())];
    if let Some(st) = &span.status {
        out.push(("status".into(), st.message.clone()));
    }
    let mut attrs = |prefix: &str, kvs: &[KeyValue]| {
        for kv in kvs {
            match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Value::StringValue(s)) => out.push((format!("{prefix}{}", kv.key), s.clone())),
                Some(Value::ArrayValue(a)) => {
                    for v in &a.values {
                        if let Some(Value::StringValue(s)) = &v.value {
                            out.push((format!("{prefix}{}[]", kv.key), s.clone()));
                        }
                    }
                }
                _ => {}
            }
        }
    };
    attrs("", &span.attributes);
    for e in &span.events {
        attrs(&format!("{}.", e.name), &e.attributes);
    }
    out
}

fn array_len(span: &Span, key: &str) -> Option<usize> {
    span.attributes.iter().find(|a| a.key == key).and_then(|a| {
        match a.value.as_ref()?.value.as_ref()? {
            Value::ArrayValue(a) => Some(a.values.len()),
            _ => None,
        }
    })
}

fn event_attr(span: &Span, event: &str, key: &str) -> Option<String> {
    let e = span.events.iter().find(|e| e.name == event)?;
    match e
        .attributes
        .iter()
        .find(|a| a.key == key)?
        .value
        .as_ref()?
        .value
        .as_ref()?
    {
        Value::StringValue(s) => Some(s.clone()),
        _ => None,
    }
}

fn assert_cut(what: &str, got: &str, original: &str, max: usize) {
    assert!(got.len() <= max, "{what}: {} bytes, over {max}", got.len());
    assert!(
        got.ends_with(MARKER),
        "{what} was shortened without the marker"
    );
    let kept = &got[..got.len() - MARKER.len()];
    assert!(
        original.starts_with(kept),
        "{what} is not a prefix of the original"
    );
}

#[test]
fn client_and_upstream_strings_are_bounded_in_spans_and_on_the_latency_page() {
    let path = format!("/{}", "p".repeat(60_000));
    let method = "X".repeat(2_000);
    let model = "m".repeat(100_000);
    let response_model = "r".repeat(50_000);
    let response_id = "i".repeat(50_000);
    let reason = "z".repeat(1_000);
    let message = "e".repeat(200_000);
    let up = {
        let (response_model, response_id, reason, message) = (
            response_model.clone(),
            response_id.clone(),
            reason.clone(),
            message.clone(),
        );
        Scripted::start(move |s, req| {
            if req.path != "/v1/chat/completions" {
                upstream::json(s, 404, "{}");
                return;
            }
            upstream::sse_head(s);
            let first = serde_json::json!({"choices":[{"finish_reason":null,"index":0,"delta":{"content":"Hi."}}],
                "id":response_id,"model":response_model,"object":"chat.completion.chunk"});
            upstream::chunk(s, format!("data: {first}\n\n").as_bytes());
            // A stream may send a finish reason on every event.
            for _ in 0..1_000 {
                let e = serde_json::json!({"choices":[{"finish_reason":reason,"index":0,"delta":{}}],
                    "object":"chat.completion.chunk"});
                upstream::chunk(s, format!("data: {e}\n\n").as_bytes());
            }
            let e =
                serde_json::json!({"error":{"message":message,"type":"server_error","code":500}});
            upstream::chunk(s, format!("data: {e}\n\n").as_bytes());
            upstream::end_chunks(s);
        })
    };
    let (url, received) = otlp::http_receiver();
    let proxy = common::proxy::Llamatap::start(
        &up.url(),
        &["--otlp-endpoint", &url, "--otlp-protocol", "http"],
    );
    let mut r = http::send(&proxy.addr(), "GET", &path, &[], b"").unwrap();
    assert_eq!(r.head.status, 404);
    r.read_all().unwrap();
    let mut r = http::send(&proxy.addr(), &method, "/props", &[], b"").unwrap();
    assert_eq!(r.head.status, 404);
    r.read_all().unwrap();
    let body = serde_json::json!({"model":model,"stream":true,"messages":[{"role":"user","content":"Hi"}]});
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", &body.to_string()).unwrap();
    assert_eq!(r.head.status, 200);
    r.read_all().unwrap();

    // Three requests, a SERVER and a CLIENT span each.
    let spans = received.wait(6, Duration::from_secs(20));
    assert_eq!(spans.len(), 6, "{} spans arrived", spans.len());
    for span in &spans {
        for (key, s) in strings(span) {
            assert!(
                s.len() <= MAX_TEXT,
                "span {:?}: {key} has {} bytes",
                &span.name[..span.name.len().min(40)],
                s.len()
            );
        }
        assert!(
            span.name.len() <= MAX_NAME + 32,
            "span name of {} bytes",
            span.name.len()
        );
    }
    let server = |p: &dyn Fn(&Span) -> bool| {
        spans
            .iter()
            .find(|s| attr_str(s, "llamatap.outcome").is_some() && p(s))
            .unwrap()
    };
    let by_path = server(&|s| attr_str(s, "url.path").is_some_and(|p| p.starts_with("/pp")));
    assert_cut(
        "url.path",
        &attr_str(by_path, "url.path").unwrap(),
        &path,
        MAX_TEXT,
    );
    let by_method =
        server(&|s| attr_str(s, "http.request.method").is_some_and(|m| m.starts_with("XX")));
    assert_cut(
        "http.request.method",
        &attr_str(by_method, "http.request.method").unwrap(),
        &method,
        MAX_NAME,
    );
    let chat = server(&|s| attr_str(s, "llamatap.route").as_deref() == Some("chat_completions"));
    assert_cut(
        "gen_ai.response.model",
        &attr_str(chat, "gen_ai.response.model").unwrap(),
        &response_model,
        MAX_NAME,
    );
    assert_cut(
        "gen_ai.response.id",
        &attr_str(chat, "gen_ai.response.id").unwrap(),
        &response_id,
        MAX_NAME,
    );
    assert_eq!(
        array_len(chat, "gen_ai.response.finish_reasons"),
        Some(MAX_REASONS)
    );
    let m = event_attr(chat, "upstream_error", "error.message").expect("no upstream_error event");
    assert_cut("error.message", &m, &message, MAX_TEXT);
    // A model name over 256 bytes is no model name at all.
    assert_eq!(attr_str(chat, "gen_ai.request.model"), None);

    // The latency page holds labels, never the client's strings.
    let (status, page) = http::get(&proxy.admin(), "/latency.json").unwrap();
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_slice(&page).unwrap();
    let text = v.to_string();
    assert!(
        !text.contains("mmmm") && !text.contains("rrrr") && !text.contains("eeee"),
        "{text}"
    );
}

#[test]
fn an_oversized_request_target_gets_431_and_never_reaches_the_upstream() {
    let up = Scripted::start(|s, _req| upstream::json(s, 200, "{}"));
    // The default limit, 64 KiB: a 60 KB path with 6 KB of headers is over.
    let proxy = common::proxy::Llamatap::start(&up.url(), &[]);
    let path = format!("/v1/models/{}", "q".repeat(60_000));
    let pad = "h".repeat(6_000);
    let mut r = http::send(&proxy.addr(), "GET", &path, &[("X-Pad", &pad)], b"").unwrap();
    assert_eq!(r.head.status, 431);
    assert_eq!(r.head.header("content-type"), Some("application/json"));
    let v: serde_json::Value = serde_json::from_slice(&r.read_all().unwrap()).unwrap();
    assert_eq!(v["error"]["code"], "headers_too_large");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    // A configured limit counts method, path and query with the headers.
    let cfg = common::temp_config("target", "[limits]\nmax_header_bytes = 2000\n");
    let small = common::proxy::Llamatap::start(&up.url(), &["--config", cfg.to_str().unwrap()]);
    let query = format!("/props?q={}", "a".repeat(2_000));
    let mut r = http::send(&small.addr(), "GET", &query, &[], b"").unwrap();
    assert_eq!(r.head.status, 431);
    r.read_all().unwrap();
    let fits = format!("/props?q={}", "a".repeat(1_000));
    let mut r = http::send(&small.addr(), "GET", &fits, &[], b"").unwrap();
    assert_eq!(r.head.status, 200);
    r.read_all().unwrap();
    let seen: Vec<usize> = up
        .requests
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.path.len())
        .collect();
    assert_eq!(
        seen,
        vec![fits.len()],
        "only the request within the limit is forwarded"
    );
}
