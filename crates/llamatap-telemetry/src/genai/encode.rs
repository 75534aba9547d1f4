//! The OTLP wire form of a snapshot of [`super::GenAiMetrics`]: one
//! `ExportMetricsServiceRequest` with one resource (`service.name`,
//! `service.version`), one scope (`llamatap`, with the conventions' schema
//! URL) and one cumulative histogram metric per instrument.
//!
//! Deliberately not here: sending it (the exporter). Pure.

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    exemplar, metric, AggregationTemporality, Exemplar as ProtoExemplar, Histogram,
    HistogramDataPoint, Metric, ResourceMetrics, ScopeMetrics,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::{Kind, Series, SeriesKey};
use crate::semconv as sc;

fn string(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_string())),
        }),
        ..Default::default()
    }
}

fn int(key: &str, value: i64) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(value)),
        }),
        ..Default::default()
    }
}

fn boolean(key: &str, value: bool) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::BoolValue(value)),
        }),
        ..Default::default()
    }
}

/// The attributes of a series' data point of `kind`.
pub fn attributes(key: &SeriesKey, kind: Kind) -> Vec<KeyValue> {
    if key.overflow {
        let mut v = vec![boolean(sc::OTEL_METRIC_OVERFLOW, true)];
        if let Some(t) = kind.token_type() {
            v.push(string(sc::GEN_AI_TOKEN_TYPE, t));
        }
        return v;
    }
    let mut v = vec![
        string(sc::GEN_AI_OPERATION_NAME, key.operation),
        string(sc::GEN_AI_PROVIDER_NAME, sc::PROVIDER_LLAMA_CPP),
    ];
    if let Some(m) = &key.request_model {
        v.push(string(sc::GEN_AI_REQUEST_MODEL, m));
    }
    if let Some(m) = &key.response_model {
        v.push(string(sc::GEN_AI_RESPONSE_MODEL, m));
    }
    if let Some(e) = key.error_type {
        v.push(string(sc::ERROR_TYPE, e));
    }
    v.push(string(sc::SERVER_ADDRESS, &key.server_address));
    v.push(int(sc::SERVER_PORT, i64::from(key.server_port)));
    if let Some(t) = kind.token_type() {
        v.push(string(sc::GEN_AI_TOKEN_TYPE, t));
    }
    v
}

fn point(key: &SeriesKey, series: &Series, kind: Kind, now: u64) -> Option<HistogramDataPoint> {
    let h = series.histogram(kind)?;
    let (min, max) = h.min_max().unzip();
    Some(HistogramDataPoint {
        attributes: attributes(key, kind),
        start_time_unix_nano: series.start_unix_nano,
        time_unix_nano: now.max(series.start_unix_nano),
        count: h.count(),
        sum: Some(h.sum()),
        bucket_counts: h.counts().to_vec(),
        explicit_bounds: h.bounds().to_vec(),
        exemplars: h
            .exemplars()
            .map(|e| ProtoExemplar {
                filtered_attributes: Vec::new(),
                time_unix_nano: e.time_unix_nano,
                span_id: e.span.span_id.to_vec(),
                trace_id: e.span.trace_id.to_vec(),
                value: Some(exemplar::Value::AsDouble(e.value)),
            })
            .collect(),
        flags: 0,
        min,
        max,
    })
}

/// The export request for `series` at `now` (nanoseconds since the Unix
/// epoch); an instrument without data points is left out.
pub fn request(
    series: &[(SeriesKey, Series)],
    service_name: &str,
    now: u64,
) -> ExportMetricsServiceRequest {
    let mut metrics: Vec<Metric> = Vec::new();
    for kind in Kind::ALL {
        let inst = kind.instrument();
        let points = series.iter().filter_map(|(k, s)| point(k, s, kind, now));
        // The two token kinds are one instrument: their points join it.
        match metrics.iter_mut().find(|m| m.name == inst.name) {
            Some(Metric {
                data: Some(metric::Data::Histogram(h)),
                ..
            }) => h.data_points.extend(points),
            _ => metrics.push(Metric {
                name: inst.name.to_string(),
                description: inst.description.to_string(),
                unit: inst.unit.to_string(),
                metadata: Vec::new(),
                data: Some(metric::Data::Histogram(Histogram {
                    data_points: points.collect(),
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                })),
            }),
        }
    }
    metrics.retain(|m| match &m.data {
        Some(metric::Data::Histogram(h)) => !h.data_points.is_empty(),
        _ => false,
    });
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    string("service.name", service_name),
                    string("service.version", env!("CARGO_PKG_VERSION")),
                ],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "llamatap".to_string(),
                    version: env!("CARGO_PKG_VERSION").to_string(),
                    ..Default::default()
                }),
                metrics,
                schema_url: sc::SCHEMA_URL.to_string(),
            }],
            schema_url: sc::SCHEMA_URL.to_string(),
        }],
    }
}
