//! Prometheus metrics: one registry owned by llamatap (never the global one),
//! the families below, and the exposition text for the admin `/metrics`.
//!
//! Labels come from fixed lists (`stage`, `route`, `outcome`, `kind`,
//! `phase`) or from [`super::models::ModelNames`] (`model`), so no client can
//! mint series. Recording happens once per request, in the proxy's `logging`.

use std::time::Duration;

use prometheus::{
    CounterVec, Encoder, Gauge, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::record::{HangupPhase, Outcome, RequestRecord};
use crate::request::Route;

/// Stage histogram buckets, seconds: sub-millisecond to a minute (the OTel
/// GenAI TTFT boundaries, extended both ways).
pub const STAGE_BUCKETS: &[f64] = &[
    0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

/// Time-per-output-token buckets, seconds (OTel's, plus sub-10 ms for small models).
pub const TPOT_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
    1.0, 2.5,
];

/// The stages of [`Metrics::stage`], in waterfall order.
pub const STAGES: &[&str] = &[
    "upstream_headers",
    "first_token_any",
    "ttft",
    "first_sentence",
    "last_token",
    "e2e",
    "prefill",
    "decode",
];

/// Every metric family llamatap exports.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// `llamatap_stage_duration_seconds{stage,model}`.
    pub stage: HistogramVec,
    /// `llamatap_requests_total{model,route,outcome}`.
    pub requests: IntCounterVec,
    /// `llamatap_tokens_total{model,kind}`.
    pub tokens: IntCounterVec,
    /// `llamatap_inflight_requests`.
    pub inflight_requests: IntGauge,
    /// `llamatap_inflight_streams`.
    pub inflight_streams: IntGauge,
    /// `llamatap_time_per_output_token_seconds{model}`.
    pub tpot: HistogramVec,
    /// `llamatap_max_token_gap_seconds{model}`.
    pub max_gap: HistogramVec,
    /// `llamatap_cancellations_total{model,phase}`.
    pub cancellations: IntCounterVec,
    /// `llamatap_hangup_elapsed_seconds_total{model}`: seconds from arrival to hang-up, summed.
    pub wasted: CounterVec,
    /// `llamatap_sse_events_skipped_total`.
    pub skipped_events: IntCounter,
    /// `llamatap_otel_spans_total{result}`.
    pub spans: IntCounterVec,
    /// Per-upstream and routing families.
    pub fleet: super::fleet::FleetMetrics,
    /// `llamatap_upstream_retries_total`.
    pub upstream_retries: IntCounter,

    /// `llamatap_upstream_models{model}`.
    pub upstream_models: IntGaugeVec,
    /// `llamatap_build_info{version}`.
    pub build_info: Gauge,
}

impl Metrics {
    /// Creates and registers every family in a new registry.
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let hist = |name: &str, help: &str, labels: &[&str], buckets: &[f64]| {
            HistogramVec::new(
                HistogramOpts::new(name, help).buckets(buckets.to_vec()),
                labels,
            )
        };
        let m = Metrics {
            stage: hist(
                "llamatap_stage_duration_seconds",
                "Time from the request's arrival at llamatap to each stage (prefill and decode: llama-server's own timings).",
                &["stage", "model"],
                STAGE_BUCKETS,
            )?,
            requests: IntCounterVec::new(
                Opts::new("llamatap_requests_total", "Proxied requests by model, route and outcome."),
                &["model", "route", "outcome"],
            )?,
            tokens: IntCounterVec::new(
                Opts::new("llamatap_tokens_total", "Tokens by kind: prompt (all input tokens, cached included), cached (reused from the KV cache), completion."),
                &["model", "kind"],
            )?,
            inflight_requests: IntGauge::new("llamatap_inflight_requests", "Requests being proxied now.")?,
            inflight_streams: IntGauge::new("llamatap_inflight_streams", "Event-stream responses being forwarded now.")?,
            tpot: hist(
                "llamatap_time_per_output_token_seconds",
                "Per stream: (last token - first token) / (output tokens - 1).",
                &["model"],
                TPOT_BUCKETS,
            )?,
            max_gap: hist(
                "llamatap_max_token_gap_seconds",
                "Per stream: the longest gap between two token-carrying events.",
                &["model"],
                STAGE_BUCKETS,
            )?,
            cancellations: IntCounterVec::new(
                Opts::new("llamatap_cancellations_total", "Client hang-ups propagated upstream (the upstream connection closed), by phase."),
                &["model", "phase"],
            )?,
            wasted: CounterVec::new(
                Opts::new("llamatap_hangup_elapsed_seconds_total", "Seconds between arrival and hang-up of requests whose client hung up: upstream work the client never used."),
                &["model"],
            )?,
            skipped_events: IntCounter::new("llamatap_sse_events_skipped_total", "SSE events larger than telemetry.max_event_bytes: forwarded untouched but not parsed.")?,
            spans: IntCounterVec::new(
                Opts::new("llamatap_otel_spans_total", "Finished spans by export result: exported, dropped_queue_full, dropped_export_failed."),
                &["result"],
            )?,
            fleet: super::fleet::FleetMetrics::register(&registry)?,
            upstream_retries: IntCounter::new("llamatap_upstream_retries_total", "Requests sent again on a new upstream connection because the first one provably never reached llama-server whole.")?,

            upstream_models: IntGaugeVec::new(
                Opts::new("llamatap_upstream_models", "Model names the upstream reports (1 per name); these are the allowed model labels."),
                &["model"],
            )?,
            build_info: Gauge::with_opts(
                Opts::new("llamatap_build_info", "Always 1; the version label says which build.")
                    .const_label("version", env!("CARGO_PKG_VERSION")),
            )?,
            registry,
        };
        m.register_all()?;
        m.build_info.set(1.0);
        m.seed_model(super::models::OTHER);
        m.seed_model(super::models::NONE);
        for r in ["exported", "dropped_queue_full", "dropped_export_failed"] {
            m.spans.with_label_values(&[r]);
        }
        Ok(m)
    }

    fn register_all(&self) -> Result<(), prometheus::Error> {
        let r = &self.registry;
        r.register(Box::new(self.stage.clone()))?;
        r.register(Box::new(self.requests.clone()))?;
        r.register(Box::new(self.tokens.clone()))?;
        r.register(Box::new(self.inflight_requests.clone()))?;
        r.register(Box::new(self.inflight_streams.clone()))?;
        r.register(Box::new(self.tpot.clone()))?;
        r.register(Box::new(self.max_gap.clone()))?;
        r.register(Box::new(self.cancellations.clone()))?;
        r.register(Box::new(self.wasted.clone()))?;
        r.register(Box::new(self.skipped_events.clone()))?;
        r.register(Box::new(self.spans.clone()))?;
        r.register(Box::new(self.upstream_retries.clone()))?;

        r.register(Box::new(self.upstream_models.clone()))?;
        r.register(Box::new(self.build_info.clone()))?;
        Ok(())
    }

    /// Records one finished request under `model` (already a bounded label).
    pub fn record(&self, rec: &RequestRecord, model: &str) {
        self.requests
            .with_label_values(&[model, rec.route.as_str(), rec.outcome.as_str()])
            .inc();
        self.upstream_retries
            .inc_by(u64::from(rec.upstream_retries.unwrap_or(0)));
        let stage = |name: &str, d: Option<Duration>| {
            if let Some(d) = d {
                self.stage
                    .with_label_values(&[name, model])
                    .observe(d.as_secs_f64());
            }
        };
        stage("upstream_headers", rec.upstream_headers);
        stage("first_token_any", rec.first_token_any);
        stage("ttft", rec.first_token);
        stage("first_sentence", rec.first_sentence);
        stage("last_token", rec.last_token);
        if rec.route.operation_name().is_some() {
            stage("e2e", Some(rec.end));
        }
        if let Some(t) = &rec.timings {
            let ms = |v: Option<f64>| {
                v.filter(|x| x.is_finite() && *x >= 0.0)
                    .map(|x| Duration::from_secs_f64(x / 1000.0))
            };
            stage("prefill", ms(t.prompt_ms));
            stage("decode", ms(t.predicted_ms));
        }
        let tokens = |kind: &str, n: Option<u64>| {
            if let Some(n) = n {
                self.tokens.with_label_values(&[model, kind]).inc_by(n);
            }
        };
        tokens("prompt", rec.input_tokens());
        tokens("cached", rec.cached_input_tokens());
        tokens("completion", rec.output_tokens());
        if let Some(t) = rec.time_per_output_token() {
            self.tpot
                .with_label_values(&[model])
                .observe(t.as_secs_f64());
        }
        if let Some(g) = rec.max_token_gap {
            self.max_gap
                .with_label_values(&[model])
                .observe(g.as_secs_f64());
        }
        if rec.outcome == Outcome::ClientHangup {
            let phase = rec
                .hangup_phase
                .map(|p| p.as_str())
                .unwrap_or("before_headers");
            self.cancellations.with_label_values(&[model, phase]).inc();
            self.wasted
                .with_label_values(&[model])
                .inc_by(rec.end.as_secs_f64());
        }
        if rec.skipped_events > 0 {
            self.skipped_events.inc_by(rec.skipped_events);
        }
        self.fleet.record(rec);
    }

    /// Replaces the `llamatap_upstream_models` series and creates every
    /// series of each model at zero (see [`Metrics::seed_model`]).
    pub fn set_models(&self, names: &[String]) {
        self.upstream_models.reset();
        for n in names {
            self.upstream_models.with_label_values(&[n]).set(1);
            self.seed_model(n);
        }
    }

    /// Creates every series a request can be recorded in under one model
    /// label, at zero: each stage histogram, time per output token, the
    /// longest token gap, and the counters of the LLM routes (every route for
    /// `none`, where requests without a model land). A series that exists
    /// before the first request makes that request an increase Prometheus
    /// sees (`rate()` needs a sample before it), and dashboards read 0, not
    /// "no data". `other` and `none` are seeded by [`Metrics::new`].
    pub fn seed_model(&self, model: &str) {
        for stage in STAGES {
            self.stage.with_label_values(&[stage, model]);
        }
        self.tpot.with_label_values(&[model]);
        self.max_gap.with_label_values(&[model]);
        let every_route = model == super::models::NONE;
        for route in Route::all()
            .iter()
            .filter(|r| every_route || r.operation_name().is_some())
        {
            for outcome in Outcome::ALL {
                self.requests
                    .with_label_values(&[model, route.as_str(), outcome.as_str()]);
            }
        }
        for phase in HangupPhase::ALL {
            self.cancellations
                .with_label_values(&[model, phase.as_str()]);
        }
        for kind in ["prompt", "cached", "completion"] {
            self.tokens.with_label_values(&[model, kind]);
        }
        self.wasted.with_label_values(&[model]);
    }

    /// The exposition text.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let families = self.registry.gather();
        if TextEncoder::new().encode(&families, &mut out).is_err() {
            out.clear();
        }
        out
    }
}
