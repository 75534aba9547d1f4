//! Per-upstream and routing metrics: the families that carry an `upstream`
//! label (at most 64 names at once: configured ones, and discovered
//! members, whose series are removed when they leave) and the routing
//! decisions and prediction results (fixed label lists).
//!
//! Request-level series are recorded in the proxy's `logging` through
//! [`super::Telemetry::request_finished`]; the gauges (up, in flight) are
//! set by the admin listener from the fleet's state at each scrape.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::exemplar::HistogramWithExemplars;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::metrics::{
    observe, ResultLabels, TraceExemplar, TracedHistogram, TracedHistograms, STAGE_BUCKETS,
};
use crate::record::{Outcome, RequestRecord};
use llamatap_policy::router::Reason;

/// Results of comparing a predicted cached prefix with `cache_n`.
pub const PREDICTION_RESULTS: &[&str] = &["confirmed", "shortfall", "unpredicted", "cold"];

/// `{upstream}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamLabels {
    /// A configured upstream name.
    pub upstream: String,
}

/// `{outcome,upstream}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamOutcomeLabels {
    /// [`Outcome::as_str`].
    pub outcome: &'static str,
    /// A configured upstream name.
    pub upstream: String,
}

/// `{kind,upstream}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamKindLabels {
    /// `prompt` or `cached`.
    pub kind: &'static str,
    /// A configured upstream name.
    pub upstream: String,
}

/// `{reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// [`Reason::as_str`].
    pub reason: &'static str,
}

fn ttft_histogram() -> TracedHistogram {
    HistogramWithExemplars::new(STAGE_BUCKETS.iter().copied())
}

/// The fleet's metric families.
#[derive(Clone)]
pub struct UpstreamMetrics {
    /// `llamatap_upstream_up{upstream}`.
    pub up: Family<UpstreamLabels, Gauge>,
    /// `llamatap_upstream_inflight_requests{upstream}`.
    pub inflight: Family<UpstreamLabels, Gauge>,
    /// `llamatap_upstream_requests_total{outcome,upstream}`.
    pub requests: Family<UpstreamOutcomeLabels, Counter>,
    /// `llamatap_upstream_ttft_seconds{upstream}`.
    pub ttft: TracedHistograms<UpstreamLabels>,
    /// `llamatap_upstream_tokens_total{kind,upstream}`.
    pub tokens: Family<UpstreamKindLabels, Counter>,
    /// `llamatap_routing_decisions_total{reason}`.
    pub decisions: Family<ReasonLabels, Counter>,
    /// `llamatap_routing_predictions_total{result}`.
    pub predictions: Family<ResultLabels, Counter>,
    /// `llamatap_routing_predicted_cached_tokens_total{upstream}`.
    pub predicted_tokens: Family<UpstreamLabels, Counter>,
}

impl UpstreamMetrics {
    /// Creates the families and registers them in `registry` (counters
    /// without `_total`: the encoders add it).
    pub fn register(r: &mut Registry) -> UpstreamMetrics {
        let m = UpstreamMetrics {
            up: Family::default(),
            inflight: Family::default(),
            requests: Family::default(),
            ttft: Family::new_with_constructor(ttft_histogram),
            tokens: Family::default(),
            decisions: Family::default(),
            predictions: Family::default(),
            predicted_tokens: Family::default(),
        };
        r.register(
            "llamatap_upstream_up",
            "1 when the upstream's /health answered 200 at the last check",
            m.up.clone(),
        );
        r.register(
            "llamatap_upstream_inflight_requests",
            "Requests llamatap has in flight to each upstream now",
            m.inflight.clone(),
        );
        r.register(
            "llamatap_upstream_requests",
            "Requests routed to each upstream, by outcome",
            m.requests.clone(),
        );
        r.register(
            "llamatap_upstream_ttft_seconds",
            "Time to first visible token of the requests each upstream answered",
            m.ttft.clone(),
        );
        r.register(
            "llamatap_upstream_tokens",
            "Prompt tokens each upstream processed: prompt (all, cached included) and cached (reused from its KV cache)",
            m.tokens.clone(),
        );
        r.register(
            "llamatap_routing_decisions",
            "Routing decisions by reason: prefix_hit, cold, overloaded, session, only_candidate, failover, balanced, conversation, ttft_slo",
            m.decisions.clone(),
        );
        r.register(
            "llamatap_routing_predictions",
            "Predicted cached prefix against llama-server's cache_n: confirmed, shortfall, unpredicted, cold",
            m.predictions.clone(),
        );
        r.register(
            "llamatap_routing_predicted_cached_tokens",
            "Prompt tokens the router expected each upstream to hold in its cache (compare with llamatap_upstream_tokens_total{kind=\"cached\"})",
            m.predicted_tokens.clone(),
        );
        for reason in Reason::all() {
            let _ = m.decisions.get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            });
        }
        for result in PREDICTION_RESULTS {
            let _ = m.predictions.get_or_create(&ResultLabels { result });
        }
        m
    }

    /// Creates every series of each upstream name at zero.
    pub fn seed_upstreams<S: AsRef<str>>(&self, names: &[S]) {
        for name in names {
            let upstream = UpstreamLabels {
                upstream: name.as_ref().to_string(),
            };
            let _ = self.up.get_or_create(&upstream);
            let _ = self.inflight.get_or_create(&upstream);
            for outcome in Outcome::ALL {
                let _ = self.requests.get_or_create(&UpstreamOutcomeLabels {
                    outcome: outcome.as_str(),
                    upstream: upstream.upstream.clone(),
                });
            }
            let _ = self.ttft.get_or_create(&upstream);
            for kind in ["prompt", "cached"] {
                let _ = self.tokens.get_or_create(&UpstreamKindLabels {
                    kind,
                    upstream: upstream.upstream.clone(),
                });
            }
            let _ = self.predicted_tokens.get_or_create(&upstream);
        }
    }

    /// Removes every series of upstream `name` (a discovered member left):
    /// the series stay bounded over time, not only at once.
    pub fn forget_upstream(&self, name: &str) {
        let upstream = UpstreamLabels {
            upstream: name.to_string(),
        };
        self.up.remove(&upstream);
        self.inflight.remove(&upstream);
        self.ttft.remove(&upstream);
        self.predicted_tokens.remove(&upstream);
        for outcome in Outcome::ALL {
            self.requests.remove(&UpstreamOutcomeLabels {
                outcome: outcome.as_str(),
                upstream: name.to_string(),
            });
        }
        for kind in ["prompt", "cached"] {
            self.tokens.remove(&UpstreamKindLabels {
                kind,
                upstream: name.to_string(),
            });
        }
    }

    /// Sets the gauges of upstream `name`: healthy, and requests in flight.
    pub fn set_state(&self, name: &str, healthy: bool, in_flight: u32) {
        let upstream = UpstreamLabels {
            upstream: name.to_string(),
        };
        self.up.get_or_create(&upstream).set(i64::from(healthy));
        self.inflight
            .get_or_create(&upstream)
            .set(i64::from(in_flight));
    }

    /// Records one finished request that reached the routing step;
    /// `exemplar` is the trace id of a sampled request.
    pub fn record(&self, rec: &RequestRecord, exemplar: Option<&TraceExemplar>) {
        let Some(u) = &rec.upstream else {
            return;
        };
        let upstream = UpstreamLabels {
            upstream: u.name.clone(),
        };
        self.requests
            .get_or_create(&UpstreamOutcomeLabels {
                outcome: rec.outcome.as_str(),
                upstream: u.name.clone(),
            })
            .inc();
        self.decisions
            .get_or_create(&ReasonLabels { reason: u.reason })
            .inc();
        if let Some(t) = rec.first_token {
            observe(
                &self.ttft.get_or_create(&upstream),
                t,
                exemplar,
                rec.received_wall + t,
            );
        }
        let mut tokens = UpstreamKindLabels {
            kind: "prompt",
            upstream: u.name.clone(),
        };
        if let Some(p) = rec.input_tokens() {
            self.tokens.get_or_create(&tokens).inc_by(p);
        }
        if let Some(c) = rec.cached_input_tokens() {
            tokens.kind = "cached";
            self.tokens.get_or_create(&tokens).inc_by(c);
        }
        if let Some(result) = u.prediction {
            self.predictions
                .get_or_create(&ResultLabels { result })
                .inc();
            if let Some(t) = u.predicted_cached_tokens {
                self.predicted_tokens.get_or_create(&upstream).inc_by(t);
            }
        }
    }
}
