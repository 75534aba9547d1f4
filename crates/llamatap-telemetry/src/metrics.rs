//! Prometheus metrics: one registry owned by llamatap (never a global one),
//! the families below, and their exposition for the admin `/metrics`, in the
//! classic text format or in OpenMetrics ([`Exposition`]).
//!
//! Labels come from fixed lists (`stage`, `route`, `outcome`, `kind`,
//! `phase`) or from [`super::models::ModelNames`] (`model`), so no client can
//! mint series. Recording happens once per request, in the proxy's `logging`.
//! The stage and time-per-output-token histograms keep, per bucket, the
//! latest sampled request's trace id as an exemplar (shown in OpenMetrics
//! only; the classic format has no exemplars).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::exemplar::HistogramWithExemplars;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::exposition::Exposition;
use super::genai::{GenAiMetrics, RequestModels};
use crate::record::{HangupPhase, Outcome, RequestRecord};
use llamatap_wire::request::Route;

mod labels;
mod record;
mod series;
#[cfg(test)]
mod tests;

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

/// The `kind` values of `llamatap_tokens_total`.
pub const TOKEN_KINDS: [&str; 3] = ["prompt", "cached", "completion"];

/// The stages of [`Metrics::stage`], in waterfall order.
pub const STAGES: &[&str] = &[
    "queued",
    "upstream_headers",
    "first_token_any",
    "ttft",
    "first_sentence",
    "last_token",
    "e2e",
    "prefill",
    "decode",
];

pub use labels::*;

/// A histogram whose buckets keep a trace-id exemplar.
pub type TracedHistogram = HistogramWithExemplars<TraceExemplar>;
/// A family of [`TracedHistogram`]s.
pub type TracedHistograms<L> = Family<L, TracedHistogram, fn() -> TracedHistogram>;
/// A family of plain histograms.
pub type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;
/// `llamatap_otel_spans_total{result}`, shared with the span export queue.
pub type SpanCounts = Family<ResultLabels, Counter>;

fn stage_histogram() -> TracedHistogram {
    HistogramWithExemplars::new(STAGE_BUCKETS.iter().copied())
}

fn tpot_histogram() -> TracedHistogram {
    HistogramWithExemplars::new(TPOT_BUCKETS.iter().copied())
}

fn gap_histogram() -> Histogram {
    Histogram::new(STAGE_BUCKETS.iter().copied())
}

/// Observes `v` in `h`, with `exemplar` (and its moment) when the request was sampled.
pub fn observe(h: &TracedHistogram, v: Duration, exemplar: Option<&TraceExemplar>, at: SystemTime) {
    match exemplar {
        Some(e) => h.observe(v.as_secs_f64(), Some(e.clone()), Some(at)),
        None => h.observe(v.as_secs_f64(), None, None),
    }
}

/// Every metric family llamatap exports.
pub struct Metrics {
    registry: Arc<Registry>,
    last_render: std::sync::atomic::AtomicUsize,
    /// `llamatap_stage_duration_seconds{model,stage}`.
    pub stage: TracedHistograms<StageLabels>,
    /// `llamatap_requests_total{model,outcome,route}`.
    pub requests: Family<RequestLabels, Counter>,
    /// `llamatap_tokens_total{kind,model}`.
    pub tokens: Family<TokenLabels, Counter>,
    /// `llamatap_inflight_requests`.
    pub inflight_requests: Gauge,
    /// `llamatap_inflight_streams`.
    pub inflight_streams: Gauge,
    /// `llamatap_time_per_output_token_seconds{model}`.
    pub tpot: TracedHistograms<ModelLabels>,
    /// `llamatap_max_token_gap_seconds{model}`.
    pub max_gap: Histograms<ModelLabels>,
    /// `llamatap_cancellations_total{model,phase}`.
    pub cancellations: Family<PhaseLabels, Counter>,
    /// `llamatap_hangup_elapsed_seconds_total{model}`: seconds from arrival to hang-up, summed.
    pub wasted: Family<ModelLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
    /// `llamatap_sse_events_skipped_total`.
    pub skipped_events: Counter,
    /// `llamatap_otel_spans_total{result}`.
    pub spans: SpanCounts,
    /// `llamatap_access_log_lines_total{result}`.
    pub access_lines: SpanCounts,
    /// Per-upstream and routing families.
    pub upstreams: super::upstreams::UpstreamMetrics,
    /// llama-server's own `llamacpp:*` series, re-exported.
    pub llamacpp: Arc<super::reexport::LlamacppSeries>,
    /// `llamatap_upstream_models{model,upstream}`.
    pub upstream_models: Family<ServedLabels, Gauge>,
    /// `llamatap_build_info{version}`.
    pub build_info: Family<VersionLabels, Gauge>,
    /// Per-tenant families.
    pub tenants: super::tenant::TenantMetrics,
    /// `llamatap_prefill_recomputed_*_total{cause}`.
    pub cachebreak: super::cachebreak::CacheBreakMetrics,
    /// The admission queue's families.
    pub queue: super::queue::QueueMetrics,
    /// `llamatap_continuations_total{reason,result}`.
    pub continuation: super::continuation::ContinuationMetrics,
    /// `llamatap_conversation_*`.
    pub conversation: super::conversation::ConversationMetrics,
    /// The TTFT prediction's families.
    pub ttft: super::ttft::TtftMetrics,
    /// The OTLP metrics (off unless OTLP metrics export is on).
    pub genai: Arc<GenAiMetrics>,
}

impl Metrics {
    /// Creates and registers every family in a new registry. Counter names
    /// are registered without `_total`: the encoders add it.
    pub fn new() -> Metrics {
        let mut r = Registry::default();
        let stage: TracedHistograms<StageLabels> = Family::new_with_constructor(stage_histogram);
        r.register(
            "llamatap_stage_duration_seconds",
            "Time from the request's arrival at llamatap to each stage (prefill and decode: llama-server's own timings)",
            stage.clone(),
        );
        let requests = Family::<RequestLabels, Counter>::default();
        r.register(
            "llamatap_requests",
            "Proxied requests by model, route and outcome",
            requests.clone(),
        );
        let tokens = Family::<TokenLabels, Counter>::default();
        r.register(
            "llamatap_tokens",
            "Tokens by kind: prompt (all input tokens, cached included), cached (reused from the KV cache), completion",
            tokens.clone(),
        );
        let inflight_requests = Gauge::default();
        r.register(
            "llamatap_inflight_requests",
            "Requests being proxied now",
            inflight_requests.clone(),
        );
        let inflight_streams = Gauge::default();
        r.register(
            "llamatap_inflight_streams",
            "Event-stream responses being forwarded now",
            inflight_streams.clone(),
        );
        let tpot: TracedHistograms<ModelLabels> = Family::new_with_constructor(tpot_histogram);
        r.register(
            "llamatap_time_per_output_token_seconds",
            "Per stream: (last token - first token) / (output tokens - 1)",
            tpot.clone(),
        );
        let max_gap: Histograms<ModelLabels> = Family::new_with_constructor(gap_histogram);
        r.register(
            "llamatap_max_token_gap_seconds",
            "Per stream: the longest gap between two token-carrying events",
            max_gap.clone(),
        );
        let cancellations = Family::<PhaseLabels, Counter>::default();
        r.register(
            "llamatap_cancellations",
            "Client hang-ups propagated upstream (the upstream connection closed), by phase",
            cancellations.clone(),
        );
        let wasted = Family::<ModelLabels, Counter<f64, std::sync::atomic::AtomicU64>>::default();
        r.register(
            "llamatap_hangup_elapsed_seconds",
            "Seconds between arrival and hang-up of requests whose client hung up: upstream work the client never used",
            wasted.clone(),
        );
        let skipped_events = Counter::default();
        r.register(
            "llamatap_sse_events_skipped",
            "SSE events larger than telemetry.max_event_bytes: forwarded untouched but not parsed",
            skipped_events.clone(),
        );
        let spans = SpanCounts::default();
        r.register(
            "llamatap_otel_spans",
            "Finished spans by export result: exported, dropped_queue_full, dropped_export_failed",
            spans.clone(),
        );
        let access_lines = SpanCounts::default();
        r.register(
            "llamatap_access_log_lines",
            "Access-log lines by result: written, dropped_queue_full (the writer fell behind), dropped_write_failed",
            access_lines.clone(),
        );
        let upstreams = super::upstreams::UpstreamMetrics::register(&mut r);
        let tenants = super::tenant::TenantMetrics::register(&mut r);
        let cachebreak = super::cachebreak::CacheBreakMetrics::register(&mut r);
        let queue = super::queue::QueueMetrics::register(&mut r);
        let continuation = super::continuation::ContinuationMetrics::register(&mut r);
        let conversation = super::conversation::ConversationMetrics::register(&mut r);
        let ttft = super::ttft::TtftMetrics::register(&mut r);
        let upstream_models = Family::<ServedLabels, Gauge>::default();
        r.register(
            "llamatap_upstream_models",
            "1 per model name each upstream reports that is a model label (at most 16 names are labels at once)",
            upstream_models.clone(),
        );
        let build_info = Family::<VersionLabels, Gauge>::default();
        r.register(
            "llamatap_build_info",
            "Always 1; the version label says which build",
            build_info.clone(),
        );
        let llamacpp = Arc::new(super::reexport::LlamacppSeries::default());
        r.register_collector(Box::new(llamacpp.clone()));
        let m = Metrics {
            registry: Arc::new(r),
            last_render: std::sync::atomic::AtomicUsize::new(0),
            stage,
            requests,
            tokens,
            inflight_requests,
            inflight_streams,
            tpot,
            max_gap,
            cancellations,
            wasted,
            skipped_events,
            spans,
            access_lines,
            upstreams,
            llamacpp,
            upstream_models,
            build_info,
            tenants,
            cachebreak,
            queue,
            continuation,
            conversation,
            ttft,
            genai: Arc::new(GenAiMetrics::new()),
        };
        m.build_info
            .get_or_create(&VersionLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        m.seed_model(super::models::OTHER);
        m.seed_model(super::models::NONE);
        for result in ["exported", "dropped_queue_full", "dropped_export_failed"] {
            let _ = m.spans.get_or_create(&ResultLabels { result });
        }
        for result in super::access_log::RESULTS {
            let _ = m.access_lines.get_or_create(&ResultLabels { result });
        }
        m
    }

    /// The exposition in `format` (empty if encoding failed, which writing
    /// to a `String` cannot). The buffer starts at the last answer's size
    /// (plus a little), so a scrape allocates once instead of doubling its
    /// way up to a few hundred KiB.
    pub fn render(&self, format: Exposition) -> Vec<u8> {
        let hint = self.last_render.load(std::sync::atomic::Ordering::Relaxed);
        let mut out = String::with_capacity(hint + hint / 8 + 4096);
        let done = match format {
            Exposition::Classic => {
                prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
            }
            Exposition::OpenMetrics => {
                prometheus_client::encoding::text::encode(&mut out, &self.registry)
            }
        };
        if done.is_err() {
            out.clear();
        }
        let out = super::order::sorted(&out);
        self.last_render
            .store(out.len(), std::sync::atomic::Ordering::Relaxed);
        out.into_bytes()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
