//! From a metric to its trace, against the real thing: Debian's Prometheus
//! (with exemplar storage) scrapes llamatap in front of the real
//! llama-server with OTLP export on, and the exemplars Prometheus stores on
//! the TTFT histogram name traces the OTLP receiver received.

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
    let llama = LlamaServer::start("tiny", &[]);
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
}
