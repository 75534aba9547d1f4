//! Command-line flags and their environment variables.
//!
//! Flags only carry values; [`crate::config::Config::load`] decides precedence
//! and validates. This module starts nothing.

use std::path::PathBuf;

use clap::Parser;

use crate::config::{Overrides, RawMetricsExport};

/// llamatap: a drop-in proxy for llama-server that measures time to first token and first sentence.
#[derive(Debug, Parser)]
#[command(name = "llamatap", version, about)]
pub struct Cli {
    /// Config file (TOML). See conf/llamatap.example.toml.
    #[arg(long, env = "LLAMATAP_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Validate a config file, print one line, and exit (non-zero when invalid).
    #[arg(long, value_name = "PATH")]
    pub check_config: Option<PathBuf>,
    /// Proxy listener address [default: 0.0.0.0:8080].
    #[arg(long, env = "LLAMATAP_LISTEN", value_name = "ADDR")]
    pub listen: Option<String>,
    /// llama-server base URL; repeat for several [default: http://127.0.0.1:8081].
    #[arg(
        long,
        env = "LLAMATAP_UPSTREAM",
        value_name = "URL",
        value_delimiter = ','
    )]
    pub upstream: Vec<String>,
    /// How one of several upstreams is chosen: prefix_affinity, least_busy or round_robin [default: prefix_affinity].
    #[arg(long, env = "LLAMATAP_ROUTING_POLICY", value_name = "POLICY")]
    pub routing_policy: Option<String>,
    /// Admin listener for /healthz, /readyz, /metrics and /latency [default: 127.0.0.1:9464].
    #[arg(long, env = "LLAMATAP_ADMIN_LISTEN", value_name = "ADDR")]
    pub admin_listen: Option<String>,
    /// OTLP endpoint for traces; tracing is off without one.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// OTLP transport: grpc or http (http/protobuf).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_PROTOCOL", value_name = "PROTOCOL")]
    pub otlp_protocol: Option<String>,
    /// JSON access log, one line per request: a file (appended to) or `-` for stdout [default: none].
    #[arg(long, env = "LLAMATAP_ACCESS_LOG", value_name = "PATH")]
    pub access_log: Option<String>,
    /// Worker threads of the proxy [default: 1].
    #[arg(long, env = "LLAMATAP_THREADS")]
    pub threads: Option<usize>,
    /// Seconds SIGTERM waits for in-flight requests [default: 10].
    #[arg(long, env = "LLAMATAP_GRACE_PERIOD_SECONDS")]
    pub grace_period_seconds: Option<u64>,
    /// Take over the listening sockets of a running llamatap (zero-downtime upgrade; send it SIGQUIT).
    #[arg(long)]
    pub upgrade: bool,
    /// Upgrade socket path, shared by old and new process.
    #[arg(
        long,
        env = "LLAMATAP_UPGRADE_SOCK",
        default_value = "/tmp/llamatap_upgrade.sock"
    )]
    pub upgrade_sock: String,
    /// PID file to write at start and remove at exit (only while it still holds this process's id) [default: none].
    #[arg(long, env = "LLAMATAP_PID_FILE", value_name = "PATH")]
    pub pid_file: Option<PathBuf>,
}

impl Cli {
    /// The overrides these flags (and `OTEL_*` variables) carry.
    pub fn overrides(&self) -> Overrides {
        Overrides {
            listen: self.listen.clone(),
            upstreams: self.upstream.clone(),
            routing_policy: self.routing_policy.clone(),
            admin_listen: self.admin_listen.clone(),
            otlp_endpoint: self.otlp_endpoint.clone(),
            otlp_protocol: self.otlp_protocol.clone(),
            service_name: std::env::var("OTEL_SERVICE_NAME")
                .ok()
                .filter(|s| !s.is_empty()),
            sample_ratio: sampler_ratio_from_env(),
            threads: self.threads,
            grace_period_seconds: self.grace_period_seconds,
            api_keys: std::env::var("LLAMATAP_API_KEYS")
                .ok()
                .filter(|s| !s.trim().is_empty())
                .map(|s| s.split(',').map(|k| k.trim().to_string()).collect()),
            upstream_api_key: std::env::var("LLAMATAP_UPSTREAM_API_KEY")
                .ok()
                .filter(|s| !s.is_empty()),
            access_log: self.access_log.clone(),
            metrics_export: RawMetricsExport {
                exporter: env("OTEL_METRICS_EXPORTER"),
                endpoint: env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"),
                protocol: env("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"),
                interval_ms: env("OTEL_METRIC_EXPORT_INTERVAL"),
                timeout_ms: env("OTEL_METRIC_EXPORT_TIMEOUT"),
            },
        }
    }
}

/// One of the two listeners, as [`Cli::listener_source`] names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// `--listen` / `LLAMATAP_LISTEN` / `listen`.
    Proxy,
    /// `--admin-listen` / `LLAMATAP_ADMIN_LISTEN` / `admin_listen`.
    Admin,
}

impl Cli {
    /// Where a listener's address was set, in the words an operator
    /// changes it with: `--listen`, `LLAMATAP_LISTEN`, `listen in FILE`,
    /// or `the default; --listen moves it`.
    pub fn listener_source(&self, which: Listener) -> String {
        let (flag, var, key, value) = match which {
            Listener::Proxy => ("--listen", "LLAMATAP_LISTEN", "listen", &self.listen),
            Listener::Admin => (
                "--admin-listen",
                "LLAMATAP_ADMIN_LISTEN",
                "admin_listen",
                &self.admin_listen,
            ),
        };
        if value.is_some() {
            let given = std::env::args().any(|a| a == flag || a.starts_with(&format!("{flag}=")));
            return if given { flag } else { var }.to_string();
        }
        let in_file = self.config.as_deref().and_then(|p| {
            let raw = crate::config::RawConfig::from_file(p).ok()?;
            let set = match which {
                Listener::Proxy => raw.listen.is_some(),
                Listener::Admin => raw.admin_listen.is_some(),
            };
            set.then(|| format!("{key} in {}", p.display()))
        });
        in_file.unwrap_or_else(|| format!("the default; {flag} moves it"))
    }
}

/// A variable's value; unset and empty are alike (as OpenTelemetry reads them).
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|s| !s.trim().is_empty())
}

/// Reads `OTEL_TRACES_SAMPLER`/`OTEL_TRACES_SAMPLER_ARG` into a ratio.
/// `always_on`/`parentbased_always_on` give 1.0, `always_off`/`parentbased_always_off` 0.0,
/// `traceidratio`/`parentbased_traceidratio` the argument.
fn sampler_ratio_from_env() -> Option<f64> {
    let sampler = std::env::var("OTEL_TRACES_SAMPLER").ok()?;
    match sampler.as_str() {
        "always_on" | "parentbased_always_on" => Some(1.0),
        "always_off" | "parentbased_always_off" => Some(0.0),
        "traceidratio" | "parentbased_traceidratio" => std::env::var("OTEL_TRACES_SAMPLER_ARG")
            .ok()
            .and_then(|a| a.trim().parse().ok())
            .or(Some(1.0)),
        _ => None,
    }
}
