#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Traces where operators look for them: a real Jaeger (the `jaeger`
//! binary, v2, in-memory storage) receives llamatap's spans over OTLP/gRPC
//! and OTLP/HTTP, and each request's trace is found by its id through
//! Jaeger's query API as the UI would show it: the SERVER span under the
//! caller's parent, its `first_token` and `first_sentence` events at their
//! moments, the cache-break and queue attributes; every exemplar trace id
//! of `/metrics` is found there too.
//!
//! Needs llama-server and the jaeger binary (`scripts/ensure-deps.sh` builds
//! both); fails loudly without them.

mod common;

use std::time::Duration;

use common::http;
use common::jaeger::Jaeger;
use common::llama::LlamaServer;
use common::proxy::Llamatap;
use serde_json::{json, Value};

/// A tag's value on a span or a log (`[{"key", "type", "value"}]`).
fn tag<'a>(tags: &'a Value, key: &str) -> Option<&'a Value> {
    tags.as_array()?
        .iter()
        .find(|t| t["key"] == key)
        .map(|t| &t["value"])
}

/// Streams one chat through `addr` under the caller's `traceparent`.
fn chat(addr: &str, traceparent: &str, system: &str, extra: &[Value]) -> String {
    let mut messages = vec![json!({"role": "system", "content": system})];
    messages.extend_from_slice(extra);
    let body = json!({
        "messages": messages,
        "max_tokens": 24,
        "temperature": 0,
        "ignore_eos": true,
        "stream": true,
    })
    .to_string();
    let mut r = http::send(
        addr,
        "POST",
        "/v1/chat/completions",
        &[
            ("traceparent", traceparent),
            ("Authorization", "Bearer sk-voice-012345"),
        ],
        body.as_bytes(),
    )
    .unwrap();
    assert_eq!(r.head.status, 200);
    String::from_utf8_lossy(&r.read_all().unwrap()).into_owned()
}

fn ids(n: u64) -> (String, String) {
    (
        format!("4bf92f3577b34da6a3ce929d{n:08x}"),
        format!("00f067aa0b{n:06x}"),
    )
}

/// The SERVER span of a Jaeger trace answer.
fn server_span(trace: &Value) -> &Value {
    trace["data"][0]["spans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| tag(&s["tags"], "span.kind").is_some_and(|k| k == "server"))
        .unwrap_or_else(|| panic!("no SERVER span in {trace}"))
}

/// The timestamp (µs) of the span's log (event) named `name`.
fn event_at(span: &Value, name: &str) -> Option<u64> {
    span["logs"].as_array()?.iter().find_map(|l| {
        let named = tag(&l["fields"], "event").is_some_and(|v| v == name);
        named.then(|| l["timestamp"].as_u64()).flatten()
    })
}

const SYSTEM: &str = "You are a lighthouse keeper. Answer in short sentences.";
const CONFIG: &str = "[queue]\nenabled = true\n\
    [[auth.keys]]\nname = \"voice\"\nkey = \"sk-voice-012345\"\npriority = \"interactive\"\n";

#[test]
fn each_request_is_found_in_jaeger_with_its_events_parent_and_attributes() {
    let jaeger = Jaeger::start("grpc");
    let llama = LlamaServer::start("tiny", &["-np", "2"]);
    let cfg = common::temp_config("jaeger", CONFIG);
    let p = Llamatap::start(
        &llama.base_url,
        &[
            "--otlp-endpoint",
            &format!("http://{}", jaeger.otlp_grpc),
            "--otlp-protocol",
            "grpc",
            "--config",
            cfg.to_str().unwrap(),
        ],
    );
    let user = json!({"role": "user", "content": "Tell me about the lamp."});
    let mut seen = Vec::new();
    for (n, system) in [(1u64, SYSTEM), (2, "You keep the lighthouse. Be brief.")] {
        let (trace, parent) = ids(n);
        let extra = if n == 1 {
            vec![user.clone()]
        } else {
            vec![
                user.clone(),
                json!({"role": "assistant", "content": "It turns."}),
                json!({"role": "user", "content": "And at night?"}),
            ]
        };
        let answer = chat(
            &p.addr(),
            &format!("00-{trace}-{parent}-01"),
            system,
            &extra,
        );
        assert!(answer.contains("[DONE]"), "{answer}");
        seen.push((trace, parent));
    }
    for (i, (trace, parent)) in seen.iter().enumerate() {
        let t = jaeger.trace(trace, 1, Duration::from_secs(30));
        let span = server_span(&t);
        assert_eq!(span["traceID"], trace.as_str(), "{t}");
        // Under the caller's span.
        let refs = span["references"].as_array().unwrap();
        assert!(
            refs.iter()
                .any(|r| r["refType"] == "CHILD_OF" && r["spanID"] == parent.as_str()),
            "not under the caller's span {parent}: {refs:?}"
        );
        // Its moments, in order, within the span (Jaeger gives whole
        // microseconds: a first sentence complete only at the answer's end
        // may round to one past the span's end).
        let start = span["startTime"].as_u64().unwrap();
        let end = start + span["duration"].as_u64().unwrap() + 1;
        let first = event_at(span, "first_token").expect("first_token event");
        let sentence = event_at(span, "first_sentence").expect("first_sentence event");
        assert!(
            start <= first && first <= sentence && sentence <= end,
            "{span}"
        );
        // The queue's and the cache-break diagnosis's attributes.
        let tags = &span["tags"];
        // The queue's class (its wait is there only when it waited).
        assert_eq!(tag(tags, "llamatap.priority").unwrap(), "interactive");
        assert_eq!(tag(tags, "llamatap.tenant").unwrap(), "voice");
        let cause = tag(tags, "llamatap.cache.break.cause").unwrap();
        let want = if i == 0 {
            "new_conversation"
        } else {
            "system_changed"
        };
        assert_eq!(cause, want, "{tags}");
        eprintln!(
            "trace {trace}: SERVER span {} µs, first token at +{} µs, first sentence at +{} µs, cache {cause}",
            end - start - 1,
            first - start,
            sentence - start
        );
    }
    // Every exemplar's trace id is a trace Jaeger holds.
    let text = p.openmetrics();
    let mut exemplars: Vec<String> = text
        .match_indices("# {trace_id=\"")
        .map(|(i, m)| text[i + m.len()..i + m.len() + 32].to_string())
        .collect();
    exemplars.sort();
    exemplars.dedup();
    assert!(!exemplars.is_empty(), "no exemplar in /metrics");
    for id in &exemplars {
        let t = jaeger.trace(id, 1, Duration::from_secs(30));
        assert!(
            t["data"][0]["spans"]
                .as_array()
                .is_some_and(|s| !s.is_empty()),
            "exemplar trace {id} is not in Jaeger: {t}"
        );
    }
    eprintln!(
        "{} exemplar trace ids, each found in Jaeger",
        exemplars.len()
    );
}

#[test]
fn spans_over_otlp_http_reach_jaeger_too_and_its_ui_is_what_the_build_serves() {
    let jaeger = Jaeger::start("http");
    let llama = LlamaServer::start("tiny", &[]);
    let p = Llamatap::start(
        &llama.base_url,
        &[
            "--otlp-endpoint",
            &format!("http://{}", jaeger.otlp_http),
            "--otlp-protocol",
            "http",
        ],
    );
    let (trace, parent) = ids(7);
    let user = json!({"role": "user", "content": "Hello."});
    let answer = chat(
        &p.addr(),
        &format!("00-{trace}-{parent}-01"),
        SYSTEM,
        &[user],
    );
    assert!(answer.contains("[DONE]"));
    let t = jaeger.trace(&trace, 1, Duration::from_secs(30));
    let span = server_span(&t);
    assert!(event_at(span, "first_token").is_some(), "{span}");
    // The service is listed as the UI's search form lists it.
    let (_, services) = http::get(&jaeger.query, "/api/services").unwrap();
    let services: Value = serde_json::from_slice(&services).unwrap();
    assert!(
        services["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s == "llamatap"),
        "{services}"
    );
    // The Go module's build embeds no UI assets (they come from an npm
    // build of jaeger-ui): the query port serves Jaeger's placeholder page.
    let (status, page) = http::get(&jaeger.query, "/").unwrap();
    let page = String::from_utf8_lossy(&page);
    assert_eq!(status, 200);
    assert!(
        page.contains("not compiled with the UI assets"),
        "the build now serves a UI: screenshot it\n{page}"
    );
}
