//! The telemetry settings, validated: what the configuration hands this
//! crate, so that nothing here depends on the whole configuration.
//!
//! Deliberately not here: reading and validating them (the binary's
//! `config` module).

use std::path::PathBuf;
use std::time::Duration;

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

/// Validated telemetry settings: the `[telemetry]` table with its
/// overrides applied.
#[derive(Debug, Clone)]
pub struct Settings {
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
    /// OTLP metrics export; `None` (the default): Prometheus `/metrics` only.
    pub otlp_metrics: Option<MetricsExport>,
}

/// Where and how often the OTLP metrics are sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsExport {
    /// gRPC: the collector's base URL; HTTP: the full URL (`…/v1/metrics`).
    pub endpoint: String,
    /// OTLP transport.
    pub protocol: OtlpProtocol,
    /// Time between two exports (`OTEL_METRIC_EXPORT_INTERVAL`).
    pub interval: Duration,
    /// Longest one export may take (`OTEL_METRIC_EXPORT_TIMEOUT`).
    pub timeout: Duration,
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
    pub fn parse(s: &str) -> Option<AccessLogTarget> {
        match s.trim() {
            "" => None,
            "-" => Some(AccessLogTarget::Stdout),
            _ => Some(AccessLogTarget::File(PathBuf::from(s))),
        }
    }
}
