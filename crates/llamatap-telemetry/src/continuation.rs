//! Continued answers as telemetry: what the request record keeps of each
//! continuation, the `llamatap.continued` span event, and
//! `llamatap_continuations_total{reason,result}`.
//!
//! Both labels take their values from fixed lists ([`Reason::ALL`],
//! [`ContinuationResult::ALL`]), every pair seeded at zero at start, so no
//! request can mint a series. Upstream names go only on the span event,
//! never on the metric.
//!
//! Deliberately not here: deciding or doing a continuation (the proxy's
//! `continuation` module), and the causes themselves ([`Reason`],
//! [`ContinuationResult`] are `llamatap_policy::answer`'s).

use std::time::{Duration, SystemTime};

use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::Span;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::semconv as sc;
use crate::record::RequestRecord;

use llamatap_policy::answer::{ContinuationResult, Reason};

/// Most continuations a record keeps (the count goes on).
pub const MAX_KEPT: usize = 8;

/// One continuation of an answer (or one refused).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Continued {
    /// From the request's arrival to the cut.
    pub at: Duration,
    /// Why.
    pub reason: Reason,
    /// How it went.
    pub result: ContinuationResult,
    /// A short fixed word saying why it was not continued or failed.
    pub why: Option<&'static str>,
    /// The upstream the answer left (its configured name).
    pub from: Option<String>,
    /// The upstream it went on from.
    pub to: Option<String>,
    /// Token events the client had before the cut.
    pub tokens_before: u64,
    /// Prompt tokens the target computed again (its `prompt_n`), when known.
    pub reprefilled: Option<u64>,
    /// Prompt tokens the target found in its KV cache (its `cache_n`), when
    /// known: the continuation's prompt was reused this far.
    pub cached: Option<u64>,
    /// Tokens the target generated (its `predicted_n`), when known: with
    /// `tokens_before`, what the answer generated in all.
    pub generated: Option<u64>,
    /// From the cut to the continuation's first token (or to the failure).
    pub pause: Duration,
}

/// `{reason, result}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ContinuationLabels {
    /// [`Reason::as_str`].
    pub reason: &'static str,
    /// [`ContinuationResult::as_str`].
    pub result: &'static str,
}

/// `{class}` of a paused answer.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PreemptionLabels {
    /// The paused answer's class (`default`, `batch`).
    pub class: &'static str,
}

/// The continuation family.
#[derive(Clone, Default)]
pub struct ContinuationMetrics {
    /// `llamatap_continuations_total{reason,result}`.
    pub continuations: Family<ContinuationLabels, Counter>,
    /// `llamatap_preemptions_total{class}`: answers paused so that a more
    /// urgent request could take their slot.
    pub preemptions: Family<PreemptionLabels, Counter>,
}

impl ContinuationMetrics {
    /// Creates the family, registers it in `r` and seeds every pair at zero.
    pub fn register(r: &mut Registry) -> Self {
        let m = ContinuationMetrics::default();
        r.register(
            "llamatap_continuations",
            "Answers cut mid-stream and continued or not, by why (upstream_died, stalled, drained, preempted) and what became of them (continued, not_continuable, failed)",
            m.continuations.clone(),
        );
        r.register(
            "llamatap_preemptions",
            "Running answers paused so that a more urgent request could take their slot, by the paused answer's class",
            m.preemptions.clone(),
        );
        for class in ["default", "batch"] {
            let _ = m.preemptions.get_or_create(&PreemptionLabels { class });
        }
        for reason in Reason::ALL {
            for result in ContinuationResult::ALL {
                let _ = m.continuations.get_or_create(&ContinuationLabels {
                    reason: reason.as_str(),
                    result: result.as_str(),
                });
            }
        }
        m
    }

    /// Counts a finished request's continuations.
    pub fn record(&self, rec: &RequestRecord) {
        self.count(&rec.continuations);
        if let Some(q) = &rec.queue {
            let paused = rec
                .continuations
                .iter()
                .filter(|c| c.reason == Reason::Preempted)
                .count();
            if paused > 0 && q.class != "interactive" {
                self.preemptions
                    .get_or_create(&PreemptionLabels { class: q.class })
                    .inc_by(u64::try_from(paused).unwrap_or(u64::MAX));
            }
        }
    }

    /// Counts `continuations`.
    pub fn count(&self, continuations: &[Continued]) {
        for c in continuations {
            self.continuations
                .get_or_create(&ContinuationLabels {
                    reason: c.reason.as_str(),
                    result: c.result.as_str(),
                })
                .inc();
        }
    }
}

/// One `llamatap.continued` event per continuation, at its cut.
pub fn add_events(s: &mut Span, rec: &RequestRecord, at: &dyn Fn(Duration) -> SystemTime) {
    use opentelemetry::trace::Span as _;
    let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    for c in &rec.continuations {
        let mut attrs = vec![
            KeyValue::new(sc::LLAMATAP_CONTINUATION_REASON, c.reason.as_str()),
            KeyValue::new(sc::LLAMATAP_CONTINUATION_RESULT, c.result.as_str()),
            KeyValue::new(
                sc::LLAMATAP_CONTINUATION_TOKENS_BEFORE,
                int(c.tokens_before),
            ),
            KeyValue::new(
                sc::LLAMATAP_CONTINUATION_PAUSE_MS,
                c.pause.as_secs_f64() * 1000.0,
            ),
        ];
        if let Some(w) = c.why {
            attrs.push(KeyValue::new(sc::LLAMATAP_CONTINUATION_WHY, w));
        }
        if let Some(f) = &c.from {
            attrs.push(KeyValue::new(sc::LLAMATAP_CONTINUATION_FROM, f.clone()));
        }
        if let Some(t) = &c.to {
            attrs.push(KeyValue::new(sc::LLAMATAP_CONTINUATION_TO, t.clone()));
        }
        if let Some(n) = c.reprefilled {
            attrs.push(KeyValue::new(sc::LLAMATAP_CONTINUATION_REPREFILLED, int(n)));
        }
        if let Some(n) = c.cached {
            attrs.push(KeyValue::new(sc::LLAMATAP_CONTINUATION_CACHED, int(n)));
        }
        if let Some(n) = c.generated {
            attrs.push(KeyValue::new(sc::LLAMATAP_CONTINUATION_GENERATED, int(n)));
        }
        s.add_event_with_timestamp(sc::EVENT_CONTINUED, at(c.at), attrs);
    }
}

#[cfg(test)]
mod tests;
