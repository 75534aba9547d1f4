//! The telemetry part of the configuration (`[telemetry]`, the `OTEL_*`
//! variables and their flags): where spans go and how, what is recorded,
//! and the bounds on what the proxy reads of a request to record it.
//!
//! Validation only: the exporters, the metrics and the access-log writer
//! live in `crate::telemetry`.

use std::path::PathBuf;

use super::check::{pick, positive, within};
use super::{invalid, ConfigError, Overrides, RawTelemetry};

/// Largest `telemetry.export_queue_size`: spans waiting for export, each
/// holding at most about 20 KiB of strings (they are bounded), so a full
/// queue stays within a few hundred MiB even then.
pub const MAX_EXPORT_QUEUE_SIZE: usize = 16_384;

/// OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// OTLP/gRPC (default port 4317).
    Grpc,
    /// OTLP/HTTP with protobuf bodies (default port 4318).
    HttpProtobuf,
}

/// Validated telemetry settings.
#[derive(Debug, Clone)]
pub struct Telemetry {
    /// OTLP endpoint; `None` disables tracing entirely.
    pub otlp_endpoint: Option<String>,
    /// OTLP transport.
    pub otlp_protocol: OtlpProtocol,
    /// `service.name`.
    pub service_name: String,
    /// Ratio sampler for new traces (parents' decisions are respected).
    pub sample_ratio: f64,
    /// Bounded export queue, spans.
    pub export_queue_size: usize,
    /// Record Prometheus metrics.
    pub metrics: bool,
    /// Put first-sentence text into telemetry.
    pub capture_content: bool,
    /// SSE events above this size are skipped by the reader (still forwarded).
    pub max_event_bytes: usize,
    /// Request body prefix inspected for model and parameters.
    pub max_inspect_bytes: usize,
    /// Where the access log goes; `None`: no access log.
    pub access_log: Option<AccessLogTarget>,
}

/// Where access-log lines are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessLogTarget {
    /// Standard output (`-`).
    Stdout,
    /// A file, opened for appending (created if missing).
    File(PathBuf),
}

impl AccessLogTarget {
    /// `-` is stdout, empty is none, anything else a path.
    fn parse(s: &str) -> Option<AccessLogTarget> {
        match s.trim() {
            "" => None,
            "-" => Some(AccessLogTarget::Stdout),
            _ => Some(AccessLogTarget::File(PathBuf::from(s))),
        }
    }
}

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
pub(super) fn telemetry(o: &Overrides, t: &RawTelemetry) -> Result<Telemetry, ConfigError> {
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
    Ok(Telemetry {
        otlp_endpoint: endpoint,
        otlp_protocol: parse_protocol(&protocol)?,
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
        metrics: t.metrics.unwrap_or(true),
        capture_content: t.capture_content.unwrap_or(false),
        max_event_bytes: positive("telemetry.max_event_bytes", t.max_event_bytes, 1 << 20)?,
        max_inspect_bytes: positive("telemetry.max_inspect_bytes", t.max_inspect_bytes, 1 << 20)?,
        access_log: o
            .access_log
            .as_deref()
            .or(t.access_log.as_deref())
            .and_then(AccessLogTarget::parse),
    })
}
