//! Benchmarks of the one recording per request (`Metrics::record`, in the
//! proxy's `logging`): the Prometheus families alone (OTLP metrics off, the
//! default), the same with the OTLP metrics on, and the OTLP aggregation
//! alone; each for a streamed chat with a sampled trace (exemplars), its
//! series already made.
//!
//! Run: `cargo bench --bench record -- --warm-up-time 1 --measurement-time 3`

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use criterion::{criterion_group, criterion_main, Criterion};
use llamatap_telemetry::genai::{GenAiMetrics, RequestModels, SpanRef};
use llamatap_telemetry::metrics::{Metrics, TraceExemplar};
use llamatap_telemetry::models::ModelNames;
use llamatap_telemetry::record::{QueueFacts, RequestRecord, UpstreamFacts};
use llamatap_wire::request::RequestFacts;
use std::hint::black_box;

fn record() -> RequestRecord {
    RequestRecord {
        request: RequestFacts {
            model: Some("tiny".into()),
            ..RequestFacts::default()
        },
        received_wall: SystemTime::now(),
        finish_reasons: vec!["stop".into()],
        usage: Some(llamatap_wire::llama::Usage {
            input_tokens: Some(412),
            output_tokens: Some(96),
            ..Default::default()
        }),
        token_events: 96,
        response_bytes: 20_000,
        client_address: Some("127.0.0.1:51234".into()),
        upstream: Some(UpstreamFacts {
            name: "a".into(),
            host: "127.0.0.1".into(),
            port: 8081,
            policy: "prefix_affinity",
            reason: "only",
            failovers: 0,
            predicted_cached_tokens: None,
            prediction: None,
        }),
        conversation: None,
        queue: Some(QueueFacts {
            class: "default",
            wait: Duration::from_millis(3),
            waited: false,
        }),
        ..RequestRecord::example()
    }
}

fn otlp_on() -> GenAiMetrics {
    let mut g = GenAiMetrics::new();
    g.enable(("127.0.0.1", 8081));
    g
}

fn bench(c: &mut Criterion) {
    let rec = record();
    let span = SpanRef {
        trace_id: [0x4b; 16],
        span_id: [0x00; 8],
    };
    let exemplar = TraceExemplar {
        trace_id: Arc::new("4bf92f3577b34da6a3ce929d0e0e4736".into()),
        span,
    };
    let models = RequestModels {
        request: Some("tiny".into()),
        response: Some("tiny".into()),
    };
    let mut g = c.benchmark_group("record_chat");
    let off = Metrics::new();
    off.seed_model("tiny");
    g.bench_function("prometheus_only", |b| {
        b.iter(|| {
            off.record(
                black_box(&rec),
                "tiny",
                &RequestModels::default(),
                Some(&exemplar),
            )
        })
    });
    let mut on = Metrics::new();
    on.seed_model("tiny");
    on.genai = Arc::new(otlp_on());
    // With the two model labels looked up, as `Telemetry::request_finished`
    // does when OTLP metrics are on.
    let names = ModelNames::new(vec!["tiny".into()]);
    g.bench_function("prometheus_and_otlp", |b| {
        b.iter(|| {
            let rec = black_box(&rec);
            let models = RequestModels {
                request: rec.request.model.as_deref().map(|m| names.label(Some(m))),
                response: rec.response_model.as_deref().map(|m| names.label(Some(m))),
            };
            on.record(rec, "tiny", &models, Some(&exemplar))
        })
    });
    let alone = otlp_on();
    g.bench_function("otlp_alone", |b| {
        b.iter(|| alone.record(black_box(&rec), &models, Some(span)))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
