//! Telemetry: Prometheus metrics, OpenTelemetry spans, the access log, the
//! model-label set and the recent-request ring, behind one [`Telemetry`]
//! handle the proxy and the admin listener share.
//!
//! The proxy calls in twice per request: [`Telemetry::request_started`] at
//! arrival and [`Telemetry::request_finished`] in `logging`. Nothing here runs
//! per event.

pub mod access_line;
pub mod access_log;
pub mod cachebreak;
pub mod continuation;
pub mod conversation;
pub mod export;
pub mod exposition;
pub mod genai;
pub mod logs;
pub mod metric_export;
pub mod metrics;
pub mod models;
pub mod observe;
pub mod order;
pub mod queue;
pub mod recent;
pub mod record;
pub mod reexport;
pub mod semconv;
pub mod served;
pub mod settings;
pub mod spans;
pub mod tenant;
pub mod ttft;
pub mod upstreams;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::record::RequestRecord;
use access_log::AccessLog;
use genai::{GenAiMetrics, RequestModels};
use metric_export::MetricExporter;
use metrics::{Metrics, TraceExemplar};
use models::ModelNames;
use recent::{RecentRequest, RecentRequests};
use settings::{AccessLogTarget, Settings};
use spans::{RequestSpan, Tracing};

/// Failure to start telemetry.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The access log cannot be opened.
    #[error("cannot open the access log {path}: {source}")]
    AccessLog {
        /// The configured path.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// OTLP export could not start.
    #[error(transparent)]
    Tracing(#[from] spans::TracingError),
    /// OTLP metrics export could not start.
    #[error(transparent)]
    MetricExport(#[from] metric_export::MetricExportError),
}

/// Shared telemetry state.
pub struct Telemetry {
    /// Metric families.
    pub metrics: Metrics,
    /// Record per-request metrics.
    pub metrics_enabled: bool,
    /// Tracing, when an OTLP endpoint is configured.
    pub tracing: Option<Tracing>,
    /// Allowed model labels.
    pub models: ModelNames,
    /// Recent requests for the latency page.
    pub recent: RecentRequests,
    /// The access log, when configured.
    pub access: Option<AccessLog>,
    /// The OTLP metrics exporter, when `OTEL_METRICS_EXPORTER=otlp`.
    pub metric_export: Option<MetricExporter>,
    served: served::Served,
    inflight: AtomicI64,
}

/// What telemetry starts from: its settings, and the names it seeds its
/// series with.
#[derive(Debug)]
pub struct Start<'a> {
    /// The validated `[telemetry]` settings.
    pub settings: &'a Settings,
    /// The configured upstreams' names (a discovered name's members are
    /// seeded as they join).
    pub upstreams: Vec<&'a str>,
    /// `server.address` and `server.port` of a request that was never
    /// routed: the first configured upstream's.
    pub default_server: (&'a str, u16),
    /// The tenants' label values.
    pub tenants: Vec<&'a str>,
    /// `[models] aliases`: model labels known before any upstream answers.
    pub model_aliases: &'a [String],
    /// How many recent requests the latency page keeps.
    pub recent_requests: usize,
}

impl Telemetry {
    /// Builds metrics and, with an endpoint, tracing.
    pub fn start(cfg: &Start<'_>) -> Result<Arc<Telemetry>, TelemetryError> {
        let mut metrics = Metrics::new();
        let metric_export = match &cfg.settings.otlp_metrics {
            Some(export) if cfg.settings.metrics => {
                let mut genai = GenAiMetrics::new();
                genai.enable(cfg.default_server);
                metrics.genai = Arc::new(genai);
                Some(MetricExporter::start(
                    export,
                    &cfg.settings.service_name,
                    metrics.genai.clone(),
                )?)
            }
            _ => None,
        };
        // A discovered name's members are seeded as they join.
        metrics.upstreams.seed_upstreams(&cfg.upstreams);
        metrics.tenants.seed(&cfg.tenants);
        let tracing = Tracing::start(cfg.settings, cfg.default_server, metrics.spans.clone())?;
        let access = match &cfg.settings.access_log {
            Some(target) => Some(
                AccessLog::open(target, metrics.access_lines.clone()).map_err(|source| {
                    TelemetryError::AccessLog {
                        path: match target {
                            AccessLogTarget::Stdout => "-".to_string(),
                            AccessLogTarget::File(p) => p.display().to_string(),
                        },
                        source,
                    }
                })?,
            ),
            None => None,
        };
        let models = ModelNames::new(cfg.model_aliases.to_vec());
        // The aliases are known now; the upstreams' names come with their /v1/models.
        for alias in models.list() {
            metrics.seed_model(&alias);
        }
        Ok(Arc::new(Telemetry {
            metrics,
            metrics_enabled: cfg.settings.metrics,
            tracing,
            models,
            recent: RecentRequests::new(cfg.recent_requests),
            access,
            metric_export,
            served: served::Served::default(),
            inflight: AtomicI64::new(0),
        }))
    }

    /// A request arrived.
    pub fn request_started(&self) {
        self.inflight.fetch_add(1, Ordering::Relaxed);
        if self.metrics_enabled {
            self.metrics.inflight_requests.inc();
        }
    }

    /// An event stream started being forwarded (`on`) or stopped (`!on`).
    pub fn stream_active(&self, on: bool) {
        if self.metrics_enabled {
            if on {
                self.metrics.inflight_streams.inc();
            } else {
                self.metrics.inflight_streams.dec();
            }
        }
    }

    /// A request finished: span, metrics, access log, latency page. The
    /// span ends first: a histogram exemplar names the request's trace only
    /// when the export queue took its SERVER span.
    pub fn request_finished(&self, rec: &RequestRecord, span: Option<RequestSpan>) {
        self.inflight.fetch_sub(1, Ordering::Relaxed);
        let model = self.models.label(rec.model());
        let trace_id = span.as_ref().map(Tracing::trace_id);
        let ids = span.as_ref().map(Tracing::span_ids);
        let sampled = span.as_ref().and_then(Tracing::sampled_trace_id);
        let span_ref = span.as_ref().map(Tracing::span_ref);
        let queued = match (&self.tracing, span) {
            (Some(t), Some(s)) => t.finish(s, rec),
            _ => false,
        };
        if self.metrics_enabled {
            self.metrics.inflight_requests.dec();
            let exemplar =
                sampled
                    .zip(span_ref)
                    .filter(|_| queued)
                    .map(|(id, span)| TraceExemplar {
                        trace_id: Arc::new(id),
                        span,
                    });
            let models = if self.metrics.genai.enabled() {
                RequestModels {
                    request: rec
                        .request
                        .model
                        .as_deref()
                        .map(|m| self.models.label(Some(m))),
                    response: rec
                        .response_model
                        .as_deref()
                        .map(|m| self.models.label(Some(m))),
                }
            } else {
                RequestModels::default()
            };
            self.metrics.record(rec, &model, &models, exemplar.as_ref());
        }
        if let Some(log) = &self.access {
            log.submit(crate::access_line::line(rec, &model, ids.as_ref()));
        }
        if rec.route.operation_name().is_some() {
            self.recent
                .push(RecentRequest::from_record(rec, model, trace_id));
        }
    }

    /// Publishes the model names each upstream serves (its configured
    /// name, the names from its `/v1/models`): the allowed `model` labels,
    /// their series, and `llamatap_upstream_models`.
    pub fn publish_models(&self, served: &[(String, Vec<String>)]) {
        self.served.publish(&self.models, &self.metrics, served);
    }

    /// A member joined the fleet (a discovered address): its series start
    /// at zero.
    pub fn upstream_joined(&self, name: &str) {
        self.metrics.upstreams.seed_upstreams(&[name]);
        self.metrics.queue.seed_upstream(name);
    }

    /// A member left the fleet: every series labelled with its name goes
    /// (the caller publishes the fleet's models again for the served pairs).
    pub fn upstream_left(&self, name: &str) {
        self.metrics.upstreams.forget_upstream(name);
        self.metrics.queue.forget_upstream(name);
        self.metrics.ttft.forget_upstream(name);
        self.metrics.llamacpp.clear(name);
    }

    /// Requests in flight now.
    pub fn inflight(&self) -> i64 {
        self.inflight.load(Ordering::Relaxed)
    }

    /// Writes the access-log lines, exports the spans still queued and the
    /// metrics a last time, then stops, giving up after `within` (at
    /// shutdown: a black-holing collector or a stalled disk cannot hold the
    /// exit).
    pub fn shutdown(&self, within: Duration) {
        let deadline = std::time::Instant::now() + within;
        if let Some(log) = &self.access {
            log.shutdown(within);
        }
        if let Some(m) = &self.metric_export {
            m.shutdown(deadline.saturating_duration_since(std::time::Instant::now()));
        }
        if let Some(t) = &self.tracing {
            t.shutdown(deadline.saturating_duration_since(std::time::Instant::now()));
        }
    }
}
