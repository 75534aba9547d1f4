//! The OTLP metrics' variables (`OTEL_METRICS_EXPORTER`, the metrics
//! endpoint and protocol, the export interval and timeout), validated into
//! [`MetricsExport`]: off unless the exporter list names `otlp`.
//!
//! Validation only: the aggregation and the exporter live in the
//! `llamatap-telemetry` crate. Prometheus `/metrics` is always on, whatever
//! the list says.

use std::time::Duration;

use super::{ConfigError, RawMetricsExport};
use llamatap_telemetry::settings::{MetricsExport, OtlpProtocol};

#[cfg(test)]
mod tests;

/// `OTEL_METRIC_EXPORT_INTERVAL`'s default, milliseconds (OpenTelemetry's).
pub const DEFAULT_INTERVAL_MS: u64 = 60_000;
/// `OTEL_METRIC_EXPORT_TIMEOUT`'s default, milliseconds (OpenTelemetry's).
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;

fn invalid(key: &'static str, message: String) -> ConfigError {
    ConfigError::Invalid { key, message }
}

/// Whether the exporter list turns OTLP metrics on: `otlp` does; `none`
/// (alone), `prometheus` (always served at `/metrics`) and an empty list
/// do not; anything else is an error.
fn otlp_on(list: Option<&str>) -> Result<bool, ConfigError> {
    const KEY: &str = "OTEL_METRICS_EXPORTER";
    let names: Vec<String> = list
        .unwrap_or("")
        .split(',')
        .map(|n| n.trim().to_ascii_lowercase())
        .filter(|n| !n.is_empty())
        .collect();
    for n in &names {
        if !matches!(n.as_str(), "otlp" | "none" | "prometheus") {
            return Err(invalid(
                KEY,
                format!("{n:?} is not one of otlp, prometheus, none"),
            ));
        }
    }
    let otlp = names.iter().any(|n| n == "otlp");
    if otlp && names.iter().any(|n| n == "none") {
        return Err(invalid(KEY, "none cannot be listed with otlp".to_string()));
    }
    Ok(otlp)
}

fn millis(key: &'static str, v: Option<&str>, default: u64) -> Result<Duration, ConfigError> {
    let ms = match v.map(str::trim) {
        None => default,
        Some(s) => s
            .parse::<u64>()
            .map_err(|_| invalid(key, format!("{s:?} is not a whole number of milliseconds")))?,
    };
    if ms == 0 {
        return Err(invalid(
            key,
            "must be at least 1 (milliseconds)".to_string(),
        ));
    }
    Ok(Duration::from_millis(ms))
}

fn protocol(v: &str) -> Result<OtlpProtocol, ConfigError> {
    match v.trim() {
        "grpc" => Ok(OtlpProtocol::Grpc),
        "http" | "http/protobuf" => Ok(OtlpProtocol::HttpProtobuf),
        other => Err(invalid(
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
            format!("{other:?} is not one of grpc, http, http/protobuf"),
        )),
    }
}

/// The OTLP metrics export, or `None` when off. Without a metrics endpoint
/// the traces' endpoint is used (`/v1/metrics` appended for HTTP), else
/// OpenTelemetry's default (`http://localhost:4317`, or `:4318/v1/metrics`);
/// without a metrics protocol, the traces' protocol. The metrics endpoint is
/// used as written (for HTTP, the full URL), as OpenTelemetry specifies.
pub(super) fn metrics_export(
    raw: &RawMetricsExport,
    traces_endpoint: Option<&str>,
    traces_protocol: OtlpProtocol,
) -> Result<Option<MetricsExport>, ConfigError> {
    if !otlp_on(raw.exporter.as_deref())? {
        return Ok(None);
    }
    let protocol = match raw.protocol.as_deref() {
        Some(p) => protocol(p)?,
        None => traces_protocol,
    };
    let endpoint = match (raw.endpoint.as_deref(), traces_endpoint, protocol) {
        (Some(e), _, _) => e.trim().to_string(),
        (None, Some(base), OtlpProtocol::Grpc) => base.to_string(),
        (None, Some(base), OtlpProtocol::HttpProtobuf) => {
            llamatap_telemetry::metric_export::http_metrics_url(base)
        }
        (None, None, OtlpProtocol::Grpc) => "http://localhost:4317".to_string(),
        (None, None, OtlpProtocol::HttpProtobuf) => "http://localhost:4318/v1/metrics".to_string(),
    };
    if !endpoint.starts_with("http://") {
        return Err(invalid(
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            format!(
                "{endpoint:?}: must start with http:// (this build has no TLS; send to a local \
                 OpenTelemetry Collector and let it forward with TLS)"
            ),
        ));
    }
    Ok(Some(MetricsExport {
        endpoint,
        protocol,
        interval: millis(
            "OTEL_METRIC_EXPORT_INTERVAL",
            raw.interval_ms.as_deref(),
            DEFAULT_INTERVAL_MS,
        )?,
        timeout: millis(
            "OTEL_METRIC_EXPORT_TIMEOUT",
            raw.timeout_ms.as_deref(),
            DEFAULT_TIMEOUT_MS,
        )?,
    }))
}
