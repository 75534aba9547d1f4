//! Per-upstream and routing metrics: the families that carry an `upstream`
//! label (bounded by the configuration: at most 64 names) and the routing
//! decisions and prediction results (fixed label lists).
//!
//! Request-level series are recorded in the proxy's `logging` through
//! [`super::Telemetry::request_finished`]; the gauges (up, in flight) are
//! set by the admin listener from the fleet's state at each scrape.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

use super::metrics::STAGE_BUCKETS;
use crate::record::{Outcome, RequestRecord};
use crate::route::Reason;

/// Results of comparing a predicted cached prefix with `cache_n`.
pub const PREDICTION_RESULTS: &[&str] = &["confirmed", "shortfall", "unpredicted", "cold"];

/// The fleet's metric families.
#[derive(Clone)]
pub struct FleetMetrics {
    /// `llamatap_upstream_up{upstream}`.
    pub up: IntGaugeVec,
    /// `llamatap_upstream_inflight_requests{upstream}`.
    pub inflight: IntGaugeVec,
    /// `llamatap_upstream_requests_total{upstream,outcome}`.
    pub requests: IntCounterVec,
    /// `llamatap_upstream_ttft_seconds{upstream}`.
    pub ttft: HistogramVec,
    /// `llamatap_upstream_tokens_total{upstream,kind}`.
    pub tokens: IntCounterVec,
    /// `llamatap_routing_decisions_total{reason}`.
    pub decisions: IntCounterVec,
    /// `llamatap_routing_predictions_total{result}`.
    pub predictions: IntCounterVec,
    /// `llamatap_routing_predicted_cached_tokens_total{upstream}`.
    pub predicted_tokens: IntCounterVec,
}

impl FleetMetrics {
    /// Creates the families and registers them in `registry`.
    pub fn register(registry: &Registry) -> Result<FleetMetrics, prometheus::Error> {
        let m = FleetMetrics {
            up: IntGaugeVec::new(
                Opts::new("llamatap_upstream_up", "1 when the upstream's /health answered 200 at the last check."),
                &["upstream"],
            )?,
            inflight: IntGaugeVec::new(
                Opts::new("llamatap_upstream_inflight_requests", "Requests llamatap has in flight to each upstream now."),
                &["upstream"],
            )?,
            requests: IntCounterVec::new(
                Opts::new("llamatap_upstream_requests_total", "Requests routed to each upstream, by outcome."),
                &["upstream", "outcome"],
            )?,
            ttft: HistogramVec::new(
                HistogramOpts::new("llamatap_upstream_ttft_seconds", "Time to first visible token of the requests each upstream answered.")
                    .buckets(STAGE_BUCKETS.to_vec()),
                &["upstream"],
            )?,
            tokens: IntCounterVec::new(
                Opts::new("llamatap_upstream_tokens_total", "Prompt tokens each upstream processed: prompt (all, cached included) and cached (reused from its KV cache)."),
                &["upstream", "kind"],
            )?,
            decisions: IntCounterVec::new(
                Opts::new("llamatap_routing_decisions_total", "Routing decisions by reason: prefix_hit, cold, overloaded, session, only_candidate, failover, balanced."),
                &["reason"],
            )?,
            predictions: IntCounterVec::new(
                Opts::new("llamatap_routing_predictions_total", "Predicted cached prefix against llama-server's cache_n: confirmed, shortfall, unpredicted, cold."),
                &["result"],
            )?,
            predicted_tokens: IntCounterVec::new(
                Opts::new("llamatap_routing_predicted_cached_tokens_total", "Prompt tokens the router expected each upstream to hold in its cache (compare with llamatap_upstream_tokens_total{kind=\"cached\"})."),
                &["upstream"],
            )?,
        };
        registry.register(Box::new(m.up.clone()))?;
        registry.register(Box::new(m.inflight.clone()))?;
        registry.register(Box::new(m.requests.clone()))?;
        registry.register(Box::new(m.ttft.clone()))?;
        registry.register(Box::new(m.tokens.clone()))?;
        registry.register(Box::new(m.decisions.clone()))?;
        registry.register(Box::new(m.predictions.clone()))?;
        registry.register(Box::new(m.predicted_tokens.clone()))?;
        for reason in Reason::all() {
            m.decisions.with_label_values(&[reason.as_str()]);
        }
        for result in PREDICTION_RESULTS {
            m.predictions.with_label_values(&[result]);
        }
        Ok(m)
    }

    /// Creates every series of each upstream name at zero.
    pub fn seed_upstreams<S: AsRef<str>>(&self, names: &[S]) {
        for name in names {
            let n = name.as_ref();
            self.up.with_label_values(&[n]);
            self.inflight.with_label_values(&[n]);
            for outcome in Outcome::ALL {
                self.requests.with_label_values(&[n, outcome.as_str()]);
            }
            self.ttft.with_label_values(&[n]);
            for kind in ["prompt", "cached"] {
                self.tokens.with_label_values(&[n, kind]);
            }
            self.predicted_tokens.with_label_values(&[n]);
        }
    }

    /// Records one finished request that reached the routing step.
    pub fn record(&self, rec: &RequestRecord) {
        let Some(u) = &rec.upstream else {
            return;
        };
        let n = u.name.as_str();
        self.requests
            .with_label_values(&[n, rec.outcome.as_str()])
            .inc();
        self.decisions.with_label_values(&[u.reason]).inc();
        if let Some(t) = rec.first_token {
            self.ttft.with_label_values(&[n]).observe(t.as_secs_f64());
        }
        if let Some(p) = rec.input_tokens() {
            self.tokens.with_label_values(&[n, "prompt"]).inc_by(p);
        }
        if let Some(c) = rec.cached_input_tokens() {
            self.tokens.with_label_values(&[n, "cached"]).inc_by(c);
        }
        if let Some(result) = u.prediction {
            self.predictions.with_label_values(&[result]).inc();
            if let Some(t) = u.predicted_cached_tokens {
                self.predicted_tokens.with_label_values(&[n]).inc_by(t);
            }
        }
    }
}
