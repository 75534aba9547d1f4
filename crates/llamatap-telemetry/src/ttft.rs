//! The TTFT prediction's families: how far the measured TTFT fell from the
//! predicted one, by model and upstream, and the requests refused because
//! no upstream was predicted to meet their objective.
//!
//! Labels are bounded: the model label is the bounded one of every family
//! (at most 16 names and `other`), the upstream a configured or discovered
//! member name (at most 64 at once). Deliberately not here: predicting
//! (`llamatap_policy::ttft`) or deciding anything from it.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::record::RequestRecord;

/// Buckets of the measured over predicted ratio: 1 is exact.
pub const RATIO_BUCKETS: [f64; 12] = [
    0.25, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 4.0, 10.0,
];

/// `{model,upstream}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelUpstreamLabels {
    /// The bounded model label.
    pub model: String,
    /// The upstream's name.
    pub upstream: String,
}

/// `{model,reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    /// The bounded model label.
    pub model: String,
    /// `floor`: the objective was below every member's floor; `bound`:
    /// every member's calibrated bound was surely over it.
    pub reason: &'static str,
}

fn ratio_histogram() -> Histogram {
    Histogram::new(RATIO_BUCKETS)
}

/// The TTFT prediction's families.
#[derive(Clone)]
pub struct TtftMetrics {
    /// `llamatap_ttft_prediction_ratio{model,upstream}`.
    pub ratio: Family<ModelUpstreamLabels, Histogram, fn() -> Histogram>,
    /// `llamatap_ttft_slo_refusals_total{model,reason}`.
    pub refused: Family<RefusedLabels, Counter>,
    /// The ratio's label sets, so that a member that leaves takes its
    /// series with it (bounded as the labels are).
    written: Arc<Mutex<HashSet<ModelUpstreamLabels>>>,
}

impl TtftMetrics {
    /// Creates the families and registers them in `r`.
    pub fn register(r: &mut Registry) -> TtftMetrics {
        let m = TtftMetrics {
            ratio: Family::new_with_constructor(ratio_histogram),
            refused: Family::default(),
            written: Arc::default(),
        };
        r.register(
            "llamatap_ttft_prediction_ratio",
            "Measured TTFT (dispatch to first token on any channel) over the TTFT predicted before dispatch; 1 is exact",
            m.ratio.clone(),
        );
        r.register(
            "llamatap_ttft_slo_refusals",
            "Requests refused at once (503 ttft_slo_unattainable): no upstream was predicted to meet their x-slo-ttft-ms (reason bound), or it was below every upstream's floor (reason floor)",
            m.refused.clone(),
        );
        m
    }

    /// Records one finished request under the bounded `model` label.
    pub fn record(&self, rec: &RequestRecord, model: &str) {
        let Some(t) = rec.ttft else {
            return;
        };
        if rec.error_type == Some("ttft_slo_unattainable") {
            self.refused
                .get_or_create(&RefusedLabels {
                    model: model.to_string(),
                    reason: if t.floor_us.is_some() {
                        "floor"
                    } else {
                        "bound"
                    },
                })
                .inc();
            return;
        }
        let (Some(u), Some(ratio)) = (&rec.upstream, t.ratio(rec.first_token_any)) else {
            return;
        };
        let labels = ModelUpstreamLabels {
            model: model.to_string(),
            upstream: u.name.clone(),
        };
        self.ratio.get_or_create(&labels).observe(ratio);
        if let Ok(mut w) = self.written.lock() {
            w.insert(labels);
        }
    }

    /// Removes the series of upstream `name` (a discovered member left).
    pub fn forget_upstream(&self, name: &str) {
        let Ok(mut w) = self.written.lock() else {
            return;
        };
        w.retain(|l| {
            let gone = l.upstream == name;
            if gone {
                self.ratio.remove(l);
            }
            !gone
        });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use prometheus_client::encoding::text::encode;

    use super::*;
    use crate::record::TtftFacts;

    fn served_by(name: &str) -> RequestRecord {
        let mut rec = RequestRecord::example();
        if let Some(u) = rec.upstream.as_mut() {
            u.name = name.to_string();
        }
        rec.first_token_any = Some(Duration::from_millis(120));
        rec.ttft = Some(TtftFacts {
            predicted_ms: Some(100),
            confidence: "high",
            slo_ms: None,
            dispatched: Some(Duration::from_millis(20)),
            corrected_ms: None,
            progress_events: 0,
            made_room: false,
            probe: false,
            floor_us: None,
            held_ms: None,
            sequenced_ms: None,
            prefill_beside_tokens: None,
            predicted_wait_ms: None,
            slot_started_ms: None,
        });
        rec
    }

    #[test]
    fn a_member_that_leaves_takes_its_ratio_series_with_it() {
        let mut r = Registry::default();
        let m = TtftMetrics::register(&mut r);
        m.record(&served_by("gpu-a"), "m");
        m.record(&served_by("gpu-b"), "m");
        let text = |r: &Registry| {
            let mut s = String::new();
            encode(&mut s, r).unwrap();
            s
        };
        let before = text(&r);
        assert!(before.contains("upstream=\"gpu-a\""), "{before}");
        m.forget_upstream("gpu-a");
        let after = text(&r);
        assert!(!after.contains("upstream=\"gpu-a\""), "{after}");
        assert!(after.contains("upstream=\"gpu-b\""), "{after}");
    }

    #[test]
    fn refusals_are_counted_by_reason() {
        let mut r = Registry::default();
        let m = TtftMetrics::register(&mut r);
        let refused = |floor_us| {
            let mut rec = served_by("gpu-a");
            rec.error_type = Some("ttft_slo_unattainable");
            if let Some(t) = rec.ttft.as_mut() {
                t.floor_us = floor_us;
            }
            rec
        };
        m.record(&refused(Some(4485)), "m");
        m.record(&refused(None), "m");
        m.record(&refused(None), "m");
        let mut text = String::new();
        encode(&mut text, &r).unwrap();
        let count = |reason: &str| {
            let series =
                format!("llamatap_ttft_slo_refusals_total{{model=\"m\",reason=\"{reason}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(series.as_str()))
                .map(str::to_string)
        };
        assert_eq!(count("floor").as_deref(), Some("1"), "{text}");
        assert_eq!(count("bound").as_deref(), Some("2"), "{text}");
    }
}
