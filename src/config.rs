//! Configuration: the raw file shape (serde), command-line and environment
//! overrides, and the validated [`Config`] the rest of the proxy reads.
//!
//! Precedence: command-line flag, then environment variable, then the file,
//! then the built-in default. Validation always runs, and every failure is one
//! line ([`ConfigError`]). This module reads no sockets and starts nothing.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub mod discovery;
pub mod queue;
mod raw;
pub mod tenant;
#[cfg(test)]
mod tests;
mod toml_error;
mod upstreams;

pub use raw::{RawAdmin, RawAuth, RawConfig, RawLimits, RawModels, RawTelemetry, RawTimeouts};
pub use tenant::{OnError, RawKey, RawStore, Store};
pub use upstreams::{RawRouting, RawUpstream, Routing, MAX_UPSTREAMS};

/// Default proxy listener.
pub const DEFAULT_LISTEN: &str = "0.0.0.0:8080";
/// Default upstream: a local llama-server.
pub const DEFAULT_UPSTREAM: &str = "http://127.0.0.1:8081";
/// Default admin listener (loopback only).
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9464";

/// Largest `admin.recent_requests`: the latency page draws every one.
pub const MAX_RECENT_REQUESTS: usize = 10_000;
/// Largest `telemetry.export_queue_size`: spans waiting for export, each
/// holding at most about 20 KiB of strings (they are bounded), so a full
/// queue stays within a few hundred MiB even then.
pub const MAX_EXPORT_QUEUE_SIZE: usize = 16_384;

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
}

/// Where one llama-server lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamConfig {
    /// Label in metrics and spans (`host:port` unless configured).
    pub name: String,
    /// Relative share of new conversations.
    pub weight: u32,
    /// `host:port` to connect to.
    pub address: String,
    /// Host name or IP, for `server.address`.
    pub host: String,
    /// Port, for `server.port`.
    pub port: u16,
    /// Path prefix prepended to every request path (empty for none).
    pub base_path: String,
    /// `[[upstreams]] max_inflight`: this replica's slots on it (queue on).
    pub max_inflight: Option<u32>,
    /// Every address the host name resolves to is a member
    /// (`discover = "dns"`); this entry is then their template.
    pub discover: bool,
}

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
    pub telemetry: Telemetry,
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
    pub tenants: crate::tenant::Tenants,
    /// Shared store of per-minute counts; `None`: limits per replica.
    pub store: Option<Store>,
    /// Largest request body.
    pub max_body_bytes: u64,
    /// Largest request header block (names plus values).
    pub max_header_bytes: usize,
    /// The admission queue.
    pub queue: queue::Queue,
    /// How discovered upstreams are looked up.
    pub discovery: discovery::Discovery,
}

impl Config {
    /// Reads, overrides and validates. `path` may be `None` (defaults only).
    pub fn load(path: Option<&Path>, overrides: &Overrides) -> Result<Config, ConfigError> {
        let raw = match path {
            Some(p) => RawConfig::from_file(p)?,
            None => RawConfig::default(),
        };
        Config::from_raw(raw, overrides)
    }

    /// Validates a raw config with overrides applied.
    pub fn from_raw(raw: RawConfig, o: &Overrides) -> Result<Config, ConfigError> {
        let listen = pick(&o.listen, &raw.listen, DEFAULT_LISTEN);
        let upstreams = upstreams::upstreams(
            &o.upstreams,
            raw.upstream.as_deref(),
            raw.upstreams.as_deref(),
        )?;
        let routing = upstreams::routing(o.routing_policy.as_deref(), &raw.routing)?;
        let admin = pick(&o.admin_listen, &raw.admin_listen, DEFAULT_ADMIN_LISTEN);
        let t = &raw.telemetry;
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
        let threads = o.threads.or(raw.threads).unwrap_or(1);
        if threads == 0 || threads > 256 {
            return Err(invalid("threads", "must be between 1 and 256"));
        }
        let tm = &raw.upstream_timeouts;
        let api_keys = api_keys(o.api_keys.clone().or(raw.auth.api_keys))?;
        let tenants = tenant::tenants(api_keys.clone(), raw.auth.keys, &|v| std::env::var(v).ok())?;
        let store = tenant::store(raw.auth.store)?;
        let queue = queue::queue(raw.queue)?;
        let discovery = discovery::discovery(raw.discovery)?;
        let telemetry = Telemetry {
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
            max_inspect_bytes: positive(
                "telemetry.max_inspect_bytes",
                t.max_inspect_bytes,
                1 << 20,
            )?,
            access_log: o
                .access_log
                .as_deref()
                .or(t.access_log.as_deref())
                .and_then(AccessLogTarget::parse),
        };
        Ok(Config {
            listen: parse_addr("listen", &listen)?,
            upstreams,
            routing,
            admin_listen: parse_addr("admin_listen", &admin)?,
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
            queue,
            discovery,
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

fn api_keys(keys: Option<Vec<String>>) -> Result<Vec<Secret>, ConfigError> {
    let keys: Vec<String> = keys
        .unwrap_or_default()
        .into_iter()
        .map(|k| k.trim().to_string())
        .filter(|k| !k.is_empty())
        .collect();
    if keys
        .iter()
        .any(|k| k.len() < 8 || !k.bytes().all(|b| b.is_ascii_graphic()))
    {
        return Err(invalid(
            "auth.api_keys",
            "each key must be at least 8 printable ASCII characters without spaces",
        ));
    }
    Ok(keys.into_iter().map(Secret::new).collect())
}

fn pick(flag: &Option<String>, file: &Option<String>, default: &str) -> String {
    flag.clone()
        .or_else(|| file.clone())
        .unwrap_or_else(|| default.to_string())
}

fn invalid(key: &'static str, message: &str) -> ConfigError {
    ConfigError::Invalid {
        key,
        message: message.to_string(),
    }
}

fn positive(key: &'static str, v: Option<usize>, default: usize) -> Result<usize, ConfigError> {
    match v.unwrap_or(default) {
        0 => Err(invalid(key, "must be greater than zero")),
        n => Ok(n),
    }
}

fn within(
    key: &'static str,
    v: Option<usize>,
    default: usize,
    max: usize,
) -> Result<usize, ConfigError> {
    match positive(key, v, default)? {
        n if n > max => Err(ConfigError::Invalid {
            key,
            message: format!("{n} is too large: at most {max}"),
        }),
        n => Ok(n),
    }
}

fn positive_u64(key: &'static str, v: Option<u64>, default: u64) -> Result<u64, ConfigError> {
    match v.unwrap_or(default) {
        0 => Err(invalid(key, "must be greater than zero")),
        n => Ok(n),
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

fn parse_addr(key: &'static str, s: &str) -> Result<SocketAddr, ConfigError> {
    s.parse().map_err(|_| ConfigError::Invalid {
        key,
        message: format!("{s:?} is not an IP:port address"),
    })
}

/// Splits `host:port` (IPv6 in brackets); the port defaults to 80.
fn split_host_port(authority: &str) -> Option<(&str, u16)> {
    let (host, port) = if authority.starts_with('[') {
        let close = authority.find(']')?;
        let (h, rest) = authority.split_at(close + 1);
        match rest.strip_prefix(':') {
            Some(p) => (h, Some(p)),
            None if rest.is_empty() => (h, None),
            None => return None,
        }
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0)?,
        None => 80,
    };
    Some((host, port))
}

/// Parses `http://host:port[/base]`.
pub fn parse_upstream(s: &str) -> Result<UpstreamConfig, ConfigError> {
    let err = |m: &str| ConfigError::Invalid {
        key: "upstream",
        message: format!("{s:?}: {m}"),
    };
    if s.starts_with("https://") {
        return Err(err(
            "https:// is not supported (this build has no TLS); use http://, \
             or a TLS-terminating proxy next to llama-server",
        ));
    }
    let rest = s
        .strip_prefix("http://")
        .ok_or_else(|| err("only http:// URLs are supported"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    if let Some(prefix) = path.strip_suffix("/v1") {
        // The OpenAI base-URL habit: llama-server answers /v1/v1/... with 404.
        return Err(err(&format!(
            "ends in /v1; give llama-server's base URL (http://{authority}{prefix}), \
             llamatap forwards /v1/... as the client sent it"
        )));
    }
    if authority.is_empty()
        || authority.contains('@')
        || path.contains(['?', '#'])
        || path.bytes().any(|b| !b.is_ascii_graphic())
    {
        return Err(err("expected http://host:port[/path]"));
    }
    let (host, port) =
        split_host_port(authority).ok_or_else(|| err("expected http://host:port[/path]"))?;
    let valid = if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        v6.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
    };
    if !valid {
        return Err(err("invalid host"));
    }
    Ok(UpstreamConfig {
        name: format!("{host}:{port}"),
        weight: 1,
        address: format!("{host}:{port}"),
        host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port,
        base_path: path.to_string(),
        max_inflight: None,
        discover: false,
    })
}
