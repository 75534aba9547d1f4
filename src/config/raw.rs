//! The configuration file as written (TOML through serde): every key
//! optional, unknown keys rejected. Nothing here validates; turning these
//! into a [`super::Config`] is `Config::from_raw`'s job.

use serde::Deserialize;

use super::queue;
use super::tenant::RawKey;
use super::{RawRouting, RawStore, RawUpstream};

/// The file as written: every key optional, unknown keys rejected.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// Proxy listener address.
    pub listen: Option<String>,
    /// llama-server base URL (one upstream).
    pub upstream: Option<String>,
    /// Several llama-servers (instead of `upstream`).
    pub upstreams: Option<Vec<RawUpstream>>,
    /// How one of several upstreams is chosen.
    #[serde(default)]
    pub routing: RawRouting,
    /// Admin listener address.
    pub admin_listen: Option<String>,
    /// Worker threads of the proxy service.
    pub threads: Option<usize>,
    /// Seconds SIGTERM waits for in-flight requests.
    pub grace_period_seconds: Option<u64>,
    /// Upstream connection settings.
    #[serde(default)]
    pub upstream_timeouts: RawTimeouts,
    /// Telemetry settings.
    #[serde(default)]
    pub telemetry: RawTelemetry,
    /// Model-label settings.
    #[serde(default)]
    pub models: RawModels,
    /// Admin listener settings.
    #[serde(default)]
    pub admin: RawAdmin,
    /// Access control.
    #[serde(default)]
    pub auth: RawAuth,
    /// Request size limits.
    #[serde(default)]
    pub limits: RawLimits,
    /// Admission queue (`[queue]`).
    #[serde(default)]
    pub queue: queue::RawQueue,
    /// How discovered upstreams are looked up (`[discovery]`).
    #[serde(default)]
    pub discovery: super::discovery::RawDiscovery,
    /// Continuing answers cut by their upstream (`[continuation]`).
    #[serde(default)]
    pub continuation: super::continuation::RawContinuation,
    /// The TTFT predictor (`[ttft]`).
    #[serde(default)]
    pub ttft: super::ttft::RawTtft,
}

/// `[auth]` as written.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAuth {
    /// Client API keys accepted as `Authorization: Bearer <key>`.
    pub api_keys: Option<Vec<String>>,
    /// Key sent to llama-server (its `--api-key`) in place of the client's.
    pub upstream_api_key: Option<String>,
    /// Named keys: tenants (`[[auth.keys]]`).
    pub keys: Option<Vec<RawKey>>,
    /// Shared store of per-minute counts (`[auth.store]`).
    pub store: Option<RawStore>,
}

impl std::fmt::Debug for RawAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RawAuth { .. }")
    }
}

/// `[limits]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    /// Largest request body, bytes (413 above).
    pub max_body_bytes: Option<u64>,
    /// Largest total size of request header names and values, bytes (431 above).
    pub max_header_bytes: Option<usize>,
    /// Longest a write to the client may make no progress, seconds.
    pub client_write_seconds: Option<u64>,
}

/// `[upstream_timeouts]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTimeouts {
    /// TCP connect timeout, milliseconds.
    pub connect_ms: Option<u64>,
    /// Longest wait for any upstream byte (headers or body), seconds.
    pub read_seconds: Option<u64>,
    /// Longest wait to write to the upstream, seconds.
    pub write_seconds: Option<u64>,
    /// How long an idle pooled upstream connection is kept, milliseconds.
    pub pool_idle_ms: Option<u64>,
}

/// `[telemetry]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTelemetry {
    /// OTLP endpoint URL; empty or absent disables tracing.
    pub otlp_endpoint: Option<String>,
    /// `grpc` or `http`.
    pub otlp_protocol: Option<String>,
    /// `service.name` resource attribute.
    pub service_name: Option<String>,
    /// Fraction of new traces sampled, 0.0 to 1.0.
    pub sample_ratio: Option<f64>,
    /// Finished spans held for export before new ones are dropped.
    pub export_queue_size: Option<usize>,
    /// Record Prometheus metrics.
    pub metrics: Option<bool>,
    /// Put the first sentence's text on the `first_sentence` event.
    pub capture_content: Option<bool>,
    /// Largest SSE event the reader parses, bytes.
    pub max_event_bytes: Option<usize>,
    /// Largest request body prefix read for the model name, bytes.
    pub max_inspect_bytes: Option<usize>,
    /// Access log: a file path, `-` for stdout; empty or absent: none.
    pub access_log: Option<String>,
}

/// `[models]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawModels {
    /// Extra model names allowed as metric labels.
    pub aliases: Option<Vec<String>>,
    /// How often the upstream's model list is re-read, seconds.
    pub refresh_seconds: Option<u64>,
}

/// `[admin]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    /// Base URL of a Jaeger UI, for trace links on the latency page.
    pub jaeger_url: Option<String>,
    /// Requests kept for the latency page.
    pub recent_requests: Option<usize>,
}
