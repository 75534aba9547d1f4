use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::metrics::v1::{exemplar, metric, Metric};

use super::*;
use llamatap_wire::request::Route;

const SPAN: SpanRef = SpanRef {
    trace_id: [0xab; 16],
    span_id: [0xcd; 8],
};

fn record() -> RequestRecord {
    RequestRecord::example()
}

fn models() -> RequestModels {
    RequestModels {
        request: Some("tiny".into()),
        response: Some("tiny".into()),
    }
}

fn on() -> GenAiMetrics {
    let mut m = GenAiMetrics::new();
    m.enable(("default-host", 1));
    m
}

fn metric<'a>(req: &'a [Metric], name: &str) -> &'a Metric {
    req.iter().find(|m| m.name == name).unwrap()
}

fn points(m: &Metric) -> &[opentelemetry_proto::tonic::metrics::v1::HistogramDataPoint] {
    match &m.data {
        Some(metric::Data::Histogram(h)) => &h.data_points,
        _ => panic!("{} is not a histogram", m.name),
    }
}

fn attr(
    p: &opentelemetry_proto::tonic::metrics::v1::HistogramDataPoint,
    key: &str,
) -> Option<Value> {
    p.attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.clone()?.value)
}

fn s(v: &str) -> Option<Value> {
    Some(Value::StringValue(v.into()))
}

#[test]
fn buckets_hold_their_upper_bound_and_the_latest_exemplar() {
    let mut h = Histogram::new(&[1.0, 2.0]);
    h.observe(1.0, Some((SPAN, 5)));
    h.observe(0.5, Some((SPAN, 6)));
    h.observe(2.5, None);
    h.observe(f64::NAN, None);
    assert_eq!(h.counts(), &[2, 0, 1]);
    assert_eq!(h.count(), 3);
    assert_eq!(h.sum(), 4.0);
    assert_eq!(h.min_max(), Some((0.5, 2.5)));
    let ex: Vec<_> = h.exemplars().collect();
    assert_eq!(ex.len(), 1);
    assert_eq!((ex[0].value, ex[0].time_unix_nano), (0.5, 6));
}

#[test]
fn the_advised_boundaries_with_ttft_stretched_to_a_minute() {
    assert_eq!(REQUEST_DURATION_BUCKETS.len(), 14);
    assert_eq!(TPOT_BUCKETS.first(), Some(&0.01));
    assert_eq!(TPOT_BUCKETS.last(), Some(&2.5));
    for b in [10.0, 15.0, 20.0, 30.0, 45.0, 60.0] {
        assert!(TTFT_BUCKETS.contains(&b), "{b}");
    }
    for bounds in [
        REQUEST_DURATION_BUCKETS,
        TTFT_BUCKETS,
        TPOT_BUCKETS,
        TOKEN_BUCKETS,
    ] {
        assert!(bounds.windows(2).all(|w| w[0] < w[1]));
    }
}

#[test]
fn off_records_nothing() {
    let m = GenAiMetrics::new();
    m.record(&record(), &models(), Some(SPAN));
    assert!(m.snapshot().is_empty());
}

#[test]
fn one_request_feeds_every_instrument_with_the_genai_attributes() {
    let m = on();
    m.record(&record(), &models(), Some(SPAN));
    let req = encode::request(&m.snapshot(), "svc", 1_800_000_000_000_000_000);
    let rm = &req.resource_metrics[0];
    assert_eq!(rm.schema_url, sc::SCHEMA_URL);
    let ms = &rm.scope_metrics[0].metrics;
    let names: Vec<&str> = ms.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "gen_ai.server.request.duration",
            "gen_ai.server.time_to_first_token",
            "gen_ai.server.time_per_output_token",
            "gen_ai.client.token.usage",
            "llamatap.server.time_to_first_sentence",
            "llamatap.server.queue.duration",
        ]
    );
    for m in ms {
        let unit = if m.name == "gen_ai.client.token.usage" {
            "{token}"
        } else {
            "s"
        };
        assert_eq!(m.unit, unit, "{}", m.name);
    }
    let duration = &points(metric(ms, "gen_ai.server.request.duration"))[0];
    assert_eq!(duration.count, 1);
    assert_eq!(duration.sum, Some(0.31));
    assert_eq!(duration.explicit_bounds, REQUEST_DURATION_BUCKETS);
    assert_eq!(attr(duration, "gen_ai.operation.name"), s("chat"));
    assert_eq!(attr(duration, "gen_ai.provider.name"), s("llama.cpp"));
    assert_eq!(attr(duration, "gen_ai.request.model"), s("tiny"));
    assert_eq!(attr(duration, "gen_ai.response.model"), s("tiny"));
    assert_eq!(attr(duration, "server.address"), s("10.0.0.1"));
    assert_eq!(attr(duration, "server.port"), Some(Value::IntValue(8081)));
    assert_eq!(attr(duration, "error.type"), None);
    assert_eq!(duration.start_time_unix_nano, 1_700_000_000_000_000_000);
    let ex = &duration.exemplars[0];
    assert_eq!(ex.trace_id, vec![0xab; 16]);
    assert_eq!(ex.span_id, vec![0xcd; 8]);
    assert_eq!(ex.value, Some(exemplar::Value::AsDouble(0.31)));
    // Each exemplar carries the moment its value happened: TTFT at 30 ms.
    let ttft = &points(metric(ms, "gen_ai.server.time_to_first_token"))[0];
    assert_eq!(ttft.exemplars[0].time_unix_nano, 1_700_000_000_030_000_000);
    let tokens = points(metric(ms, "gen_ai.client.token.usage"));
    let by_type: Vec<(Option<Value>, Option<f64>)> = tokens
        .iter()
        .map(|p| (attr(p, "gen_ai.token.type"), p.sum))
        .collect();
    assert_eq!(
        by_type,
        [(s("input"), Some(20.0)), (s("output"), Some(10.0))]
    );
    let tpot = &points(metric(ms, "gen_ai.server.time_per_output_token"))[0];
    assert!((tpot.sum.unwrap() - 0.27 / 9.0).abs() < 1e-9);
}

#[test]
fn failures_carry_error_type_and_no_answer_stages() {
    let m = on();
    let mut rec = record();
    rec.outcome = Outcome::UpstreamError;
    rec.error_type = Some("upstream_truncated");
    rec.upstream = None;
    m.record(&rec, &models(), None);
    rec.outcome = Outcome::ClientError;
    rec.error_type = None;
    m.record(&rec, &models(), None);
    let req = encode::request(&m.snapshot(), "svc", 1);
    let ms = &req.resource_metrics[0].scope_metrics[0].metrics;
    let mut types: Vec<Option<Value>> = points(metric(ms, "gen_ai.server.request.duration"))
        .iter()
        .map(|p| {
            assert_eq!(attr(p, "server.address"), s("default-host"));
            assert!(p.exemplars.is_empty());
            attr(p, "error.type")
        })
        .collect();
    types.sort_by_key(|v| format!("{v:?}"));
    assert_eq!(types, [s("client_error"), s("upstream_truncated")]);
    assert!(ms
        .iter()
        .all(|m| m.name != "gen_ai.server.time_per_output_token"));
}

#[test]
fn error_type_is_a_plain_word_or_other() {
    let mut rec = record();
    assert_eq!(error_type(&rec), None);
    rec.outcome = Outcome::ProxyError;
    assert_eq!(error_type(&rec), Some("proxy_error"));
    rec.error_type = Some("Not a Word");
    assert_eq!(error_type(&rec), Some("_OTHER"));
}

#[test]
fn routes_that_are_no_genai_operation_are_left_out() {
    let m = on();
    let mut rec = record();
    rec.route = Route::all()
        .iter()
        .copied()
        .find(|r| r.operation_name().is_none())
        .unwrap();
    m.record(&rec, &models(), None);
    assert!(m.snapshot().is_empty());
}

#[test]
fn attribute_sets_beyond_the_cap_go_to_the_overflow_series() {
    let m = on();
    for i in 0..MAX_SERIES + 10 {
        let mut rec = record();
        if let Some(u) = &mut rec.upstream {
            u.port = u16::try_from(i).unwrap();
        }
        m.record(&rec, &models(), None);
    }
    let snap = m.snapshot();
    assert_eq!(snap.len(), MAX_SERIES + 1);
    let (key, series) = snap.iter().find(|(k, _)| k.overflow).unwrap();
    assert_eq!(series.histogram(Kind::RequestDuration).unwrap().count(), 10);
    let attrs = encode::attributes(key, Kind::RequestDuration);
    assert_eq!(attrs.len(), 1);
    assert_eq!(attrs[0].key, "otel.metric.overflow");
}

#[test]
fn a_retired_model_label_takes_its_series_along() {
    let m = on();
    m.record(&record(), &models(), None);
    m.record(&record(), &RequestModels::default(), None);
    m.remove_model("tiny");
    let snap = m.snapshot();
    assert_eq!(snap.len(), 1);
    assert_eq!(snap[0].0.request_model, None);
}
