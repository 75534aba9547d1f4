//! A real Jaeger (v2, the OpenTelemetry-Collector-based `jaeger` binary,
//! built from its Go module by `scripts/install-jaeger.sh` and cached like
//! llama-server): in-memory storage, OTLP in over gRPC and HTTP, the query
//! API out, each on a free loopback port, nothing else listening.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{free_port, http, llama, wait_until};

/// The running Jaeger, killed when dropped.
pub struct Jaeger {
    child: Child,
    /// OTLP/gRPC receiver, `127.0.0.1:port`.
    pub otlp_grpc: String,
    /// OTLP/HTTP receiver, `127.0.0.1:port`.
    pub otlp_http: String,
    /// The query service (HTTP API and UI), `127.0.0.1:port`.
    pub query: String,
    /// With a metrics pipeline: its `prometheus` exporter (OpenMetrics, with
    /// exemplars), `127.0.0.1:port`.
    pub prometheus: Option<String>,
    log: PathBuf,
}

/// The binary: `LLAMATAP_JAEGER`, else the cache's.
pub fn binary() -> PathBuf {
    std::env::var_os("LLAMATAP_JAEGER")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| llama::cache_dir().join("bin/jaeger"))
}

impl Jaeger {
    /// Starts it and waits until its query API answers.
    pub fn start(label: &str) -> Jaeger {
        Self::start_with(label, None)
    }

    /// As [`Jaeger::start`], with a metrics pipeline as well: its OTLP
    /// receiver (gRPC and HTTP) takes metrics, its OTLP exporter sends them
    /// on, as received, to the OTLP/gRPC receiver at `forward`
    /// (`127.0.0.1:port`), and its `prometheus` exporter serves them
    /// ([`Jaeger::prometheus`]).
    pub fn start_forwarding_metrics(label: &str, forward: &str) -> Jaeger {
        Self::start_with(label, Some(forward))
    }

    fn start_with(label: &str, forward: Option<&str>) -> Jaeger {
        let prometheus = forward.map(|_| format!("127.0.0.1:{}", free_port()));
        let (metrics_pipeline, metrics_exporter) = match (forward, &prometheus) {
            (Some(addr), Some(prom)) => (
                "    metrics:\n      receivers: [otlp]\n      exporters: [otlp/forward, prometheus]\n"
                    .to_string(),
                format!(
                    "  otlp/forward:\n    endpoint: {addr}\n    compression: none\n    tls:\n      insecure: true\n    \
                     sending_queue:\n      enabled: false\n    retry_on_failure:\n      enabled: false\n  \
                     prometheus:\n    endpoint: {prom}\n    enable_open_metrics: true\n"
                ),
            ),
            _ => (String::new(), String::new()),
        };
        let bin = binary();
        assert!(
            bin.is_file(),
            "jaeger not found at {} (set LLAMATAP_JAEGER, or run scripts/ensure-deps.sh, which builds it)",
            bin.display()
        );
        let (grpc, http_port, query, query_grpc) =
            (free_port(), free_port(), free_port(), free_port());
        let dir = std::env::temp_dir().join(format!(
            "llamatap-test-{}-jaeger-{label}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("jaeger.yaml");
        std::fs::write(
            &config,
            format!(
                r#"service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
{metrics_pipeline}  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{grpc}
      http:
        endpoint: 127.0.0.1:{http_port}
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
{metrics_exporter}"#
            ),
        )
        .unwrap();
        let log = dir.join("jaeger.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(&bin)
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
        let j = Jaeger {
            child,
            otlp_grpc: format!("127.0.0.1:{grpc}"),
            otlp_http: format!("127.0.0.1:{http_port}"),
            query: format!("127.0.0.1:{query}"),
            prometheus,
            log,
        };
        let up = wait_until(Duration::from_secs(60), || {
            http::get(&j.query, "/api/services").is_ok_and(|(s, _)| s == 200)
        });
        assert!(
            up,
            "jaeger never answered on {}:\n{}",
            j.query,
            j.log_tail()
        );
        j
    }

    /// The trace `id` (32 hex digits) as the query API gives it
    /// (`/api/traces/{id}`: `{"data": [{"spans": [...], ...}]}`), once it
    /// holds at least `spans` spans, or the last answer after `timeout`.
    pub fn trace(&self, id: &str, spans: usize, timeout: Duration) -> serde_json::Value {
        let mut last = serde_json::Value::Null;
        wait_until(timeout, || {
            if let Ok((200, body)) = http::get(&self.query, &format!("/api/traces/{id}")) {
                last = serde_json::from_slice(&body).unwrap_or_default();
            }
            last["data"][0]["spans"]
                .as_array()
                .is_some_and(|s| s.len() >= spans)
        });
        last
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Jaeger {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
