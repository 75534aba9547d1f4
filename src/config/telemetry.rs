//! The telemetry part of the configuration (`[telemetry]`, the `OTEL_*`
//! variables and their flags): where spans go and how, what is recorded,
//! and the bounds on what the proxy reads of a request to record it.
//!
//! Validation only: the settings' type, the exporters, the metrics and the
//! access-log writer live in the `llamatap-telemetry` crate.

use super::check::{pick, positive, within};
use super::{invalid, ConfigError, Overrides, RawTelemetry};
use llamatap_telemetry::settings::{
    AccessLogTarget, OtlpProtocol, Settings, MAX_EXPORT_QUEUE_SIZE,
};

/// An OTLP endpoint this build can send to: `http://` only, since it has no
/// TLS (an `https://` one would fail every export, and spans would be lost
/// without a line saying why).
fn otlp_endpoint(e: &str) -> Result<(), ConfigError> {
    let message = if e.starts_with("https://") {
        format!(
            "{e:?}: https:// is not supported (this build has no TLS, every span would be lost); \
             send to a local OpenTelemetry Collector over http:// and let it forward with TLS"
        )
    } else if e.starts_with("http://") {
        return Ok(());
    } else {
        format!("{e:?}: must start with http://")
    };
    Err(ConfigError::Invalid {
        key: "telemetry.otlp_endpoint",
        message,
    })
}

fn parse_protocol(s: &str) -> Result<OtlpProtocol, ConfigError> {
    match s {
        "grpc" => Ok(OtlpProtocol::Grpc),
        "http" | "http/protobuf" => Ok(OtlpProtocol::HttpProtobuf),
        other => Err(ConfigError::Invalid {
            key: "telemetry.otlp_protocol",
            message: format!("{other:?} is not one of grpc, http, http/protobuf"),
        }),
    }
}

/// The validated `[telemetry]` table, with the overrides applied.
pub(super) fn telemetry(o: &Overrides, t: &RawTelemetry) -> Result<Settings, ConfigError> {
    let endpoint = o
        .otlp_endpoint
        .clone()
        .or_else(|| t.otlp_endpoint.clone())
        .filter(|e| !e.trim().is_empty());
    if let Some(e) = &endpoint {
        otlp_endpoint(e)?;
    }
    let protocol = pick(&o.otlp_protocol, &t.otlp_protocol, "grpc");
    let ratio = o.sample_ratio.or(t.sample_ratio).unwrap_or(1.0);
    if !(0.0..=1.0).contains(&ratio) {
        return Err(invalid(
            "telemetry.sample_ratio",
            "must be between 0.0 and 1.0",
        ));
    }
    let protocol = parse_protocol(&protocol)?;
    let otlp_metrics =
        super::otlp_metrics::metrics_export(&o.metrics_export, endpoint.as_deref(), protocol)?;
    let metrics = t.metrics.unwrap_or(true);
    if otlp_metrics.is_some() && !metrics {
        return Err(invalid(
            "OTEL_METRICS_EXPORTER",
            "otlp needs telemetry.metrics = true (one recording feeds /metrics and OTLP)",
        ));
    }
    Ok(Settings {
        otlp_endpoint: endpoint,
        otlp_protocol: protocol,
        service_name: o
            .service_name
            .clone()
            .or_else(|| t.service_name.clone())
            .unwrap_or_else(|| "llamatap".to_string()),
        sample_ratio: ratio,
        export_queue_size: within(
            "telemetry.export_queue_size",
            t.export_queue_size,
            4096,
            MAX_EXPORT_QUEUE_SIZE,
        )?,
        metrics,
        capture_content: t.capture_content.unwrap_or(false),
        max_event_bytes: positive("telemetry.max_event_bytes", t.max_event_bytes, 1 << 20)?,
        max_inspect_bytes: positive("telemetry.max_inspect_bytes", t.max_inspect_bytes, 1 << 20)?,
        access_log: o
            .access_log
            .as_deref()
            .or(t.access_log.as_deref())
            .and_then(AccessLogTarget::parse),
        otlp_metrics,
    })
}
