//! From a metric, a log line or an access-log line to its trace, against
//! the real thing: Debian's Prometheus (with exemplar storage) scrapes
//! llamatap in front of the real llama-server with OTLP export on; the
//! exemplars it stores on the TTFT histogram name traces the OTLP receiver
//! received, and llama-server's own `llamacpp:*` series arrive with their
//! upstream label. Access-log lines and log lines written during a request
//! carry that request's trace (and span) id.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::http;
use common::llama::LlamaServer;
use common::otlp::{self, hex};
use common::prometheus::{urlencode, Prometheus};
use common::proxy::Llamatap;
use common::wait_until;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;

/// Unix seconds now.
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A Prometheus with exemplar storage scraping `target` every second.
fn prometheus_scraping(target: &str) -> Prometheus {
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
         scrape_configs:\n  - job_name: llamatap\n    static_configs:\n      - targets: ['{target}']\n"
    );
    Prometheus::start_with(&config, &["--enable-feature=exemplar-storage"])
}

/// The trace ids of the exemplars Prometheus holds for `selector` between
/// `start` and now.
fn exemplar_trace_ids(p: &Prometheus, selector: &str, start: f64) -> BTreeSet<String> {
    let path = format!(
        "/api/v1/query_exemplars?query={}&start={start:.3}&end={:.3}",
        urlencode(selector),
        unix_now() + 60.0
    );
    let Ok(data) = p.api(&path) else {
        return BTreeSet::new();
    };
    data.as_array()
        .into_iter()
        .flatten()
        .flat_map(|series| series["exemplars"].as_array().cloned().unwrap_or_default())
        .filter_map(|e| e["labels"]["trace_id"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn ttft_exemplars_in_prometheus_name_traces_the_collector_received() {
    // (LlamaServer always runs llama-server with --metrics.)
    let mut llama = LlamaServer::start("tiny", &[]);
    let (otlp_url, received) = otlp::http_receiver();
    let proxy = Llamatap::start(
        &llama.base_url,
        &["--otlp-endpoint", &otlp_url, "--otlp-protocol", "http"],
    );
    let prometheus = prometheus_scraping(&proxy.admin());
    let start = unix_now() - 5.0;
    const REQUESTS: usize = 4;
    for i in 0..REQUESTS {
        let body = common::llama::chat_with_system(
            "You are terse.",
            &format!("Say something about {i}."),
            true,
            16,
            i as u64,
        );
        let mut r = http::post(&proxy.addr(), "/v1/chat/completions", &body).unwrap();
        assert_eq!(r.head.status, 200);
        let out = r.read_all().unwrap();
        assert!(!http::chat_content(&out).is_empty(), "no content streamed");
    }
    let ttft = "llamatap_stage_duration_seconds_bucket{stage=\"ttft\"}";
    let mut ids = BTreeSet::new();
    assert!(
        wait_until(Duration::from_secs(60), || {
            ids = exemplar_trace_ids(&prometheus, ttft, start);
            !ids.is_empty()
        }),
        "Prometheus stored no exemplar on {ttft}\n{}",
        prometheus.log()
    );
    // Each names a trace the collector received, whose SERVER span has the
    // first_token event.
    let mut spans = Vec::new();
    let all_there = wait_until(Duration::from_secs(30), || {
        spans = received.wait(0, Duration::ZERO);
        ids.iter().all(|id| {
            spans.iter().any(|s| {
                hex(&s.trace_id) == *id
                    && s.kind == SpanKind::Server as i32
                    && s.events.iter().any(|e| e.name == "first_token")
            })
        })
    });
    let received_ids: BTreeSet<String> = spans.iter().map(|s| hex(&s.trace_id)).collect();
    assert!(
        all_there,
        "exemplar trace ids {ids:?} not all received with a first_token event; received {received_ids:?}"
    );
    assert!(ids.len() <= REQUESTS, "{ids:?}");

    // llama-server's own series, re-exported with the upstream's name
    // (by default its host:port), reach Prometheus; the counters count the
    // work just done.
    let upstream = format!("127.0.0.1:{}", llama.port);
    for (selector, at_least) in [
        ("llamacpp:requests_deferred", 0.0),
        ("llamacpp:requests_processing", 0.0),
        ("llamacpp:tokens_predicted_total", 1.0),
    ] {
        let q = format!("{selector}{{upstream=\"{upstream}\"}}");
        assert!(
            wait_until(Duration::from_secs(60), || prometheus
                .value(&q)
                .is_some_and(|v| v >= at_least)),
            "{q}: {:?}\n{}",
            prometheus.query(&q),
            proxy.metrics()
        );
    }
    let m = proxy.metrics();
    assert!(
        m.contains("# TYPE llamacpp:n_tokens_max untyped"),
        "a counter without _total keeps its name, untyped:\n{m}"
    );
    // A dead upstream's series go, rather than freeze at their last value.
    llama.kill();
    let gone = proxy.wait_metrics(Duration::from_secs(30), |m| !m.contains("llamacpp:"));
    assert!(!gone.contains("llamacpp:"), "{gone}");
}

#[test]
fn access_log_lines_name_their_spans_and_hold_no_text() {
    let llama = LlamaServer::start("tiny", &[]);
    let (otlp_url, received) = otlp::http_receiver();
    let dir = common::prometheus::temp_dir("access-log");
    let path = dir.join("access.log");
    let proxy = Llamatap::start(
        &llama.base_url,
        &[
            "--otlp-endpoint",
            &otlp_url,
            "--otlp-protocol",
            "http",
            "--access-log",
            path.to_str().unwrap(),
        ],
    );
    let prompt = "Tell me about the secret garden.";
    let body = common::llama::chat_with_system("You are terse.", prompt, true, 16, 3);
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", &body).unwrap();
    assert_eq!(r.head.status, 200);
    let traceresponse = r.head.header("traceresponse").unwrap().to_string();
    let answer = http::chat_content(&r.read_all().unwrap());
    assert!(!answer.is_empty());
    assert_eq!(http::get(&proxy.addr(), "/health").unwrap().0, 200);

    // Two lines, flushed as soon as the writer's queue ran empty.
    let mut lines: Vec<serde_json::Value> = Vec::new();
    assert!(
        wait_until(Duration::from_secs(30), || {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            lines = text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            lines.len() >= 2
        }),
        "access log: {lines:?}\n{}",
        proxy.stderr()
    );
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        !text.contains("secret garden"),
        "prompt text in the log:\n{text}"
    );
    // (A random-weight model's answer may be a word that occurs anywhere;
    // a longer one must not occur in the log.)
    let answer = answer.trim();
    assert!(
        answer.len() < 12 || !text.contains(answer),
        "completion text in the log:\n{text}"
    );
    let chat = lines
        .iter()
        .find(|l| l["route"] == "chat_completions")
        .unwrap();
    assert_eq!(chat["method"], "POST");
    assert_eq!(chat["path"], "/v1/chat/completions");
    assert_eq!(chat["status"], 200);
    assert_eq!(chat["outcome"], "ok");
    assert_eq!(chat["model"], llama.model_id.as_str());
    assert!(chat["ttft_ms"].as_f64().unwrap() > 0.0, "{chat}");
    assert!(chat["e2e_ms"].as_f64().unwrap() >= chat["ttft_ms"].as_f64().unwrap());
    assert!(chat["completion_tokens"].as_u64().unwrap() > 0, "{chat}");
    assert!(chat["client"].as_str().unwrap().starts_with("127.0.0.1:"));
    assert!(chat["time"].as_str().unwrap().ends_with('Z'));
    let (trace_id, span_id) = (
        chat["trace_id"].as_str().unwrap(),
        chat["span_id"].as_str().unwrap(),
    );
    // The ids are the client's traceresponse and the exported SERVER span's.
    assert_eq!(traceresponse[3..35].to_string(), trace_id);
    assert_eq!(traceresponse[36..52].to_string(), span_id);
    let spans = received.wait(3, Duration::from_secs(30));
    let server = spans
        .iter()
        .find(|s| hex(&s.span_id) == span_id)
        .unwrap_or_else(|| panic!("no span {span_id} among {} received", spans.len()));
    assert_eq!(hex(&server.trace_id), trace_id);
    assert_eq!(server.kind, SpanKind::Server as i32);
    assert_eq!(
        otlp::attr_str(server, "http.route").as_deref(),
        Some("chat_completions")
    );
    let health = lines.iter().find(|l| l["route"] == "health").unwrap();
    assert_eq!(health["status"], 200);
    assert_ne!(health["trace_id"], chat["trace_id"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_access_log_that_cannot_be_opened_stops_startup_with_one_line() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_llamatap"))
        .args([
            "--access-log",
            "/nonexistent-dir/access.log",
            "--listen",
            &format!("127.0.0.1:{}", common::free_port()),
            "--admin-listen",
            &format!("127.0.0.1:{}", common::free_port()),
        ])
        .env_remove("LLAMATAP_CONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot open the access log /nonexistent-dir/access.log"),
        "{err}"
    );
}

/// The trace and span id of a `traceresponse` header.
fn ids_of(traceresponse: &str) -> (String, String) {
    let parts: Vec<&str> = traceresponse.split('-').collect();
    (parts[1].to_string(), parts[2].to_string())
}

#[test]
fn log_lines_written_during_a_request_carry_its_trace_id() {
    let (otlp_url, _received) = otlp::http_receiver();
    let tracing_on = [
        "--otlp-endpoint",
        otlp_url.as_str(),
        "--otlp-protocol",
        "http",
    ];
    // llamatap's own line: an upstream answering 500 (Pingora logs nothing,
    // the exchange itself went well).
    let up = common::upstream::Scripted::start(|s, _req| {
        common::upstream::json(s, 500, r#"{"error":{"message":"boom","code":500}}"#)
    });
    let proxy = Llamatap::start(&up.url(), &tracing_on);
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}"#;
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", body).unwrap();
    assert_eq!(r.head.status, 500);
    let (trace_id, span_id) = ids_of(r.head.header("traceresponse").unwrap());
    r.read_all().unwrap();
    let wanted = format!("trace_id={trace_id} span_id={span_id}");
    assert!(
        wait_until(Duration::from_secs(30), || proxy.stderr().lines().any(
            |l| l.contains("WARN") && l.contains("upstream answered 500") && l.ends_with(&wanted)
        )),
        "no line about the 500 ending with {wanted}:\n{}",
        proxy.stderr()
    );
    // A request without trace context in flight writes no ids: the
    // startup line has none.
    assert!(proxy
        .stderr()
        .lines()
        .filter(|l| l.contains("listening on"))
        .all(|l| !l.contains("trace_id=")));

    // A failed connect is one line, llamatap's, naming the upstream and
    // the trace (Pingora's own line about it is suppressed).
    let port = common::free_port();
    let dead = format!("http://127.0.0.1:{port}");
    let proxy = Llamatap::start(&dead, &tracing_on);
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", body).unwrap();
    assert_eq!(r.head.status, 502);
    let (trace_id, span_id) = ids_of(r.head.header("traceresponse").unwrap());
    r.read_all().unwrap();
    let wanted = format!("trace_id={trace_id} span_id={span_id}");
    assert!(
        wait_until(Duration::from_secs(30), || proxy.stderr().lines().any(
            |l| l.contains("connect failed")
                && l.contains(&format!("127.0.0.1:{port}"))
                && l.ends_with(&wanted)
        )),
        "no line about the connect ending with {wanted}:\n{}",
        proxy.stderr()
    );
    let about: Vec<String> = proxy
        .stderr()
        .lines()
        .filter(|l| l.contains(&trace_id))
        .map(str::to_string)
        .collect();
    assert_eq!(about.len(), 1, "{about:?}");

    // Pingora's own line about a failed request (the `log` crate, through
    // the same writer) names the trace too: an upstream that closes
    // without answering a route Pingora forwards.
    let rude = common::upstream::Scripted::start_conn(|mut s, log| {
        if common::upstream::next_request(&mut s, log).is_some() {
            common::upstream::reset(s);
        }
    });
    let proxy = Llamatap::start(&rude.url(), &tracing_on);
    let mut r = http::send(&proxy.addr(), "GET", "/props", &[], b"").unwrap();
    assert_eq!(r.head.status, 502);
    let (trace_id, _) = ids_of(r.head.header("traceresponse").unwrap());
    r.read_all().unwrap();
    assert!(
        wait_until(Duration::from_secs(30), || proxy.stderr().lines().any(
            |l| l.contains("pingora_proxy") && l.contains(&format!("trace_id={trace_id}"))
        )),
        "no Pingora line naming trace {trace_id}:\n{}",
        proxy.stderr()
    );
}

#[test]
fn a_failed_connect_is_one_line_per_upstream() {
    // Two dead upstreams: each connect fails once and is retried on the
    // other, then the request fails with 502.
    let (a, b) = (common::free_port(), common::free_port());
    let (ua, ub) = (
        format!("http://127.0.0.1:{a}"),
        format!("http://127.0.0.1:{b}"),
    );
    let proxy = Llamatap::start_fleet(&[&ua, &ub], &[]);
    let (status, _) = http::get(&proxy.addr(), "/v1/models").unwrap();
    assert_eq!(status, 502);
    assert!(
        wait_until(Duration::from_secs(30), || proxy
            .stderr()
            .lines()
            .any(|l| l.contains("the request fails"))),
        "{}",
        proxy.stderr()
    );
    let log = proxy.stderr();
    let about = |port: u16| -> Vec<&str> {
        log.lines()
            .filter(|l| l.contains(&format!("127.0.0.1:{port}")) && !l.contains("listening"))
            .collect()
    };
    // llamatap's warning per upstream; Pingora's retry warning, which
    // said the same, is filtered out.
    assert!(!log.contains("retry: true"), "{log}");
    let ejected = log
        .lines()
        .filter(|l| {
            l.contains("WARN llamatap::proxy:")
                && l.contains("connect failed")
                && l.contains("upstream ejected")
        })
        .count();
    assert_eq!(ejected, 2, "{log}");
    assert_eq!(log.matches("trying another").count(), 1, "{log}");
    assert_eq!(log.matches("the request fails").count(), 1, "{log}");
    // Pingora's line about the request would say the same again.
    assert!(!log.contains("pingora_proxy"), "{log}");
    assert!(!about(a).is_empty() && !about(b).is_empty(), "{log}");
}
