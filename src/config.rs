//! Configuration: the raw file shape (serde), command-line and environment
//! overrides, and the validated [`Config`] the rest of the proxy reads.
//!
//! Precedence: command-line flag, then environment variable, then the file,
//! then the built-in default. Validation always runs, and every failure is one
//! line ([`ConfigError`]). This module reads no sockets and starts nothing.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod check;
pub mod continuation;
pub mod discovery;
mod locate;
mod otlp_metrics;
pub mod queue;
mod raw;
mod routing;
pub mod slo;
mod suggest;
pub mod telemetry;
pub mod tenant;
#[cfg(test)]
mod tests;
mod toml_error;
pub mod ttft;
mod upstreams;

pub use llamatap_telemetry::settings::{AccessLogTarget, OtlpProtocol, MAX_EXPORT_QUEUE_SIZE};
pub use raw::{RawAdmin, RawAuth, RawConfig, RawLimits, RawModels, RawTelemetry, RawTimeouts};
pub use routing::{RawRouting, Routing};
pub use tenant::{OnError, RawKey, RawStore, Store};
pub use upstreams::{parse_upstream, RawUpstream, UpstreamConfig, MAX_UPSTREAMS};

use check::{invalid, parse_addr, pick, positive, positive_u64, separate_listeners, within};

/// Default proxy listener.
pub const DEFAULT_LISTEN: &str = "0.0.0.0:8080";
/// Default upstream: a local llama-server.
pub const DEFAULT_UPSTREAM: &str = "http://127.0.0.1:8081";
/// Default admin listener (loopback only).
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9464";

/// Largest `admin.recent_requests`: the latency page draws every one.
pub const MAX_RECENT_REQUESTS: usize = 10_000;

/// A configuration problem, reported as one line.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown or mistyped keys.
    #[error("invalid config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, flattened to one line.
        message: String,
    },
    /// A value of the file is out of range or malformed, at a line.
    #[error("invalid config file {path}: line {line}: {key}: {message}")]
    InvalidAt {
        /// The file.
        path: PathBuf,
        /// The 1-based line the key is written on.
        line: usize,
        /// The key, as written (with its table).
        key: String,
        /// What is wrong.
        message: String,
    },
    /// A value is out of range or malformed.
    #[error("invalid value for {key}: {message}")]
    Invalid {
        /// The key, as written in the file.
        key: &'static str,
        /// What is wrong.
        message: String,
    },
}

pub use llamatap_policy::secret::Secret;

/// Overrides from flags and environment variables (clap fills these).
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    /// `--listen` / `LLAMATAP_LISTEN`.
    pub listen: Option<String>,
    /// `--upstream` (repeatable) / `LLAMATAP_UPSTREAM` (comma-separated).
    pub upstreams: Vec<String>,
    /// `--routing-policy` / `LLAMATAP_ROUTING_POLICY`.
    pub routing_policy: Option<String>,
    /// `--admin-listen` / `LLAMATAP_ADMIN_LISTEN`.
    pub admin_listen: Option<String>,
    /// `--otlp-endpoint` / `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub otlp_endpoint: Option<String>,
    /// `--otlp-protocol` / `OTEL_EXPORTER_OTLP_PROTOCOL`.
    pub otlp_protocol: Option<String>,
    /// `OTEL_SERVICE_NAME`.
    pub service_name: Option<String>,
    /// `OTEL_TRACES_SAMPLER_ARG` (with a ratio sampler).
    pub sample_ratio: Option<f64>,
    /// `--threads` / `LLAMATAP_THREADS`.
    pub threads: Option<usize>,
    /// `--grace-period-seconds` / `LLAMATAP_GRACE_PERIOD_SECONDS`.
    pub grace_period_seconds: Option<u64>,
    /// `LLAMATAP_API_KEYS` (comma-separated).
    pub api_keys: Option<Vec<String>>,
    /// `LLAMATAP_UPSTREAM_API_KEY`.
    pub upstream_api_key: Option<String>,
    /// `--access-log` / `LLAMATAP_ACCESS_LOG`.
    pub access_log: Option<String>,
    /// The OTLP metrics' variables, as written.
    pub metrics_export: RawMetricsExport,
}

/// The OTLP metrics' `OTEL_*` variables, as written (validated with the
/// `[telemetry]` table).
#[derive(Debug, Default, Clone)]
pub struct RawMetricsExport {
    /// `OTEL_METRICS_EXPORTER`: a comma-separated list.
    pub exporter: Option<String>,
    /// `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`.
    pub endpoint: Option<String>,
    /// `OTEL_EXPORTER_OTLP_METRICS_PROTOCOL`.
    pub protocol: Option<String>,
    /// `OTEL_METRIC_EXPORT_INTERVAL`, milliseconds.
    pub interval_ms: Option<String>,
    /// `OTEL_METRIC_EXPORT_TIMEOUT`, milliseconds.
    pub timeout_ms: Option<String>,
}

impl Overrides {
    /// A flag or an environment variable gives `key` (as a validation
    /// error names it): the file's line would not be the one at fault.
    pub fn sets(&self, key: &str) -> bool {
        match key {
            "listen" => self.listen.is_some(),
            "upstream" | "upstreams" => !self.upstreams.is_empty(),
            "routing.policy" => self.routing_policy.is_some(),
            "admin_listen" => self.admin_listen.is_some(),
            "telemetry.otlp_endpoint" => self.otlp_endpoint.is_some(),
            "telemetry.otlp_protocol" => self.otlp_protocol.is_some(),
            "telemetry.service_name" => self.service_name.is_some(),
            "telemetry.sample_ratio" => self.sample_ratio.is_some(),
            "telemetry.access_log" => self.access_log.is_some(),
            "threads" => self.threads.is_some(),
            "grace_period_seconds" => self.grace_period_seconds.is_some(),
            "auth.api_keys" => self.api_keys.is_some(),
            "auth.upstream_api_key" => self.upstream_api_key.is_some(),
            _ => false,
        }
    }
}

/// The validated configuration: the single source of truth.
#[derive(Debug, Clone)]
pub struct Config {
    /// Proxy listener.
    pub listen: SocketAddr,
    /// The llama-servers, in configuration order (at least one).
    pub upstreams: Vec<UpstreamConfig>,
    /// How one of several upstreams is chosen.
    pub routing: Routing,
    /// Admin listener.
    pub admin_listen: SocketAddr,
    /// Worker threads of the proxy service.
    pub threads: usize,
    /// SIGTERM drain limit.
    pub grace_period: Duration,
    /// Upstream connect timeout.
    pub connect_timeout: Duration,
    /// Upstream read timeout (any byte).
    pub read_timeout: Duration,
    /// Upstream write timeout.
    pub write_timeout: Duration,
    /// Idle pooled upstream connections are closed after this.
    pub pool_idle_timeout: Duration,
    /// Telemetry.
    pub telemetry: llamatap_telemetry::settings::Settings,
    /// Model names accepted as labels in addition to the upstream's list.
    pub model_aliases: Vec<String>,
    /// Model list refresh interval.
    pub model_refresh: Duration,
    /// Jaeger UI base URL for links.
    pub jaeger_url: Option<String>,
    /// Requests kept for the latency page.
    pub recent_requests: usize,
    /// Client API keys; empty: no check.
    pub api_keys: Vec<Secret>,
    /// Key injected upstream as `Authorization: Bearer`.
    pub upstream_api_key: Option<Secret>,
    /// Tenants: named keys and the flat list's shared anonymous one.
    pub tenants: llamatap_policy::tenant::Tenants,
    /// Shared store of per-minute counts; `None`: limits per replica.
    pub store: Option<Store>,
    /// Largest request body.
    pub max_body_bytes: u64,
    /// Largest request header block (names plus values).
    pub max_header_bytes: usize,
    /// Longest a write to the client may make no progress (a client that
    /// stops reading), before the request ends.
    pub client_write_timeout: Duration,
    /// The admission queue.
    pub queue: queue::Queue,
    /// How discovered upstreams are looked up.
    pub discovery: discovery::Discovery,
    /// Continuing answers cut by their upstream.
    pub continuation: continuation::Continuation,
    /// The TTFT predictor's settings (`[ttft]`).
    pub ttft: ttft::Ttft,
}

impl Config {
    /// Reads, overrides and validates. `path` may be `None` (defaults only).
    /// A value of the file that fails validation is reported with its line
    /// and key, as a parse error is.
    pub fn load(path: Option<&Path>, overrides: &Overrides) -> Result<Config, ConfigError> {
        let Some(p) = path else {
            return Config::from_raw(RawConfig::default(), overrides);
        };
        let text = std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
            path: p.to_path_buf(),
            source,
        })?;
        let raw = RawConfig::from_toml(&text).map_err(|message| ConfigError::Parse {
            path: p.to_path_buf(),
            message,
        })?;
        Config::from_raw(raw, overrides).map_err(|e| match e {
            ConfigError::Invalid { key, message } if !overrides.sets(key) => {
                match locate::line_of(&text, key, &message) {
                    Some((line, key)) => ConfigError::InvalidAt {
                        path: p.to_path_buf(),
                        line,
                        key,
                        message,
                    },
                    None => ConfigError::Invalid { key, message },
                }
            }
            e => e,
        })
    }

    /// Validates a raw config with overrides applied.
    pub fn from_raw(raw: RawConfig, o: &Overrides) -> Result<Config, ConfigError> {
        let listen = pick(&o.listen, &raw.listen, DEFAULT_LISTEN);
        let upstreams = upstreams::upstreams(
            &o.upstreams,
            raw.upstream.as_deref(),
            raw.upstreams.as_deref(),
        )?;
        let routing = routing::routing(o.routing_policy.as_deref(), &raw.routing)?;
        let admin = pick(&o.admin_listen, &raw.admin_listen, DEFAULT_ADMIN_LISTEN);
        let threads = o.threads.or(raw.threads).unwrap_or(1);
        if threads == 0 || threads > 256 {
            return Err(invalid("threads", "must be between 1 and 256"));
        }
        let tm = &raw.upstream_timeouts;
        let api_keys = tenant::api_keys(o.api_keys.clone().or(raw.auth.api_keys))?;
        let tenant_slos = slo::tenants(raw.auth.keys.as_deref())?;
        let tenants = tenant::tenants(api_keys.clone(), raw.auth.keys, &|v| std::env::var(v).ok())?;
        let store = tenant::store(raw.auth.store)?;
        let queue = queue::queue(raw.queue)?.with_tenant_slos(tenant_slos);
        if queue.shared && store.is_none() {
            return Err(invalid(
                "queue.shared",
                "needs [auth.store] (the Redis the replicas share); add it, or remove queue.shared",
            ));
        }
        if queue.shared && !queue.enabled {
            return Err(invalid(
                "queue.shared",
                "needs the queue on (queue.enabled = true)",
            ));
        }
        let discovery = discovery::discovery(raw.discovery)?;
        let continuation = continuation::continuation(raw.continuation)?;
        let ttft = ttft::ttft(raw.ttft);
        let telemetry = telemetry::telemetry(o, &raw.telemetry)?;
        let listen = parse_addr("listen", &listen)?;
        let admin_listen = parse_addr("admin_listen", &admin)?;
        separate_listeners(listen, admin_listen)?;
        Ok(Config {
            listen,
            upstreams,
            routing,
            admin_listen,
            threads,
            grace_period: Duration::from_secs(
                o.grace_period_seconds
                    .or(raw.grace_period_seconds)
                    .unwrap_or(10),
            ),
            connect_timeout: Duration::from_millis(positive_u64(
                "upstream_timeouts.connect_ms",
                tm.connect_ms,
                5_000,
            )?),
            read_timeout: Duration::from_secs(positive_u64(
                "upstream_timeouts.read_seconds",
                tm.read_seconds,
                600,
            )?),
            write_timeout: Duration::from_secs(positive_u64(
                "upstream_timeouts.write_seconds",
                tm.write_seconds,
                60,
            )?),
            pool_idle_timeout: Duration::from_millis(positive_u64(
                "upstream_timeouts.pool_idle_ms",
                tm.pool_idle_ms,
                2_000,
            )?),
            telemetry,
            model_aliases: raw.models.aliases.unwrap_or_default(),
            model_refresh: Duration::from_secs(positive_u64(
                "models.refresh_seconds",
                raw.models.refresh_seconds,
                30,
            )?),
            jaeger_url: raw.admin.jaeger_url.filter(|u| !u.is_empty()),
            recent_requests: within(
                "admin.recent_requests",
                raw.admin.recent_requests,
                300,
                MAX_RECENT_REQUESTS,
            )?,
            api_keys,
            upstream_api_key: o
                .upstream_api_key
                .clone()
                .or(raw.auth.upstream_api_key)
                .filter(|k| !k.is_empty())
                .map(Secret::new),
            tenants,
            store,
            max_body_bytes: positive_u64(
                "limits.max_body_bytes",
                raw.limits.max_body_bytes,
                64 << 20,
            )?,
            max_header_bytes: positive(
                "limits.max_header_bytes",
                raw.limits.max_header_bytes,
                64 << 10,
            )?,
            client_write_timeout: Duration::from_secs(positive_u64(
                "limits.client_write_seconds",
                raw.limits.client_write_seconds,
                30,
            )?),
            queue,
            discovery,
            continuation,
            ttft,
        })
    }
}

impl RawConfig {
    /// Reads and parses a TOML file.
    pub fn from_file(path: &Path) -> Result<RawConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        RawConfig::from_toml(&text).map_err(|message| ConfigError::Parse {
            path: path.to_path_buf(),
            message,
        })
    }

    /// Parses TOML text; the error is flattened to one line.
    pub fn from_toml(text: &str) -> Result<RawConfig, String> {
        toml::from_str(text).map_err(|e| toml_error::describe(&e, text))
    }
}
