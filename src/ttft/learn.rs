//! What the predictor learns from a finished answer: the book's rates
//! (a member's first answer starting it from a peer serving the same
//! model), and the ratio of measured over predicted TTFT that calibrates
//! the bound, or a probe's, which takes the place of the largest.
//!
//! Deliberately not here: what a finished answer is made of (the proxy's
//! `predict`), and the bound's verdict ([`super::slo`]).

use llamatap_policy::ttft::{Confidence, Observation, Prediction, Stratum};

use super::{key, model_of, Finished, Key, Predicted, Predictor};
use crate::fleet::Fleet;

impl Predictor {
    /// Learns from a finished request predicted as `p`; `fleet` tells
    /// which members run the same model (for a member's first answer).
    pub fn learn(&self, fleet: &Fleet, p: &Predicted, done: &Finished) {
        if done.timings.prompt_ms <= 0.0 && done.timings.prompt_n == 0 {
            return;
        }
        let obs = Observation {
            timings: done.timings,
            busy_others: p.busy_others,
            prefill_others: done.prefill_others,
            prefill_before: done.prefill_before,
            beside_at_dispatch: p.beside_tokens,
            max_tokens: done.max_tokens,
            prompt_bytes: (p.prompt_bytes > 0).then_some(p.prompt_bytes),
            predicted_uncached: p.cached_bytes == 0,
            ttft_ms: done
                .ttft
                .filter(|_| p.at_once)
                .map(|d| d.as_secs_f64() * 1000.0),
            process: restarts(fleet, p.key.0),
            ..Observation::default()
        };
        // The ratio that calibrates the bound: from sure predictions only
        // (a guess before the member was learned says nothing of the
        // error to come).
        let ratio = match (p.prediction, done.ttft) {
            (Prediction::Estimate(e), Some(t)) if e.confidence == Confidence::High => {
                (e.ttft_ms > 0.0).then(|| t.as_secs_f64() * 1000.0 / e.ttft_ms)
            }
            _ => None,
        };
        if let Ok(mut book) = self.book.lock() {
            // A member's first answer starts it from a peer running the
            // same model (asked of the fleet only then).
            let same = |k: &Key| {
                let mine = model_of(fleet, &p.key);
                mine.is_some() && model_of(fleet, k) == mine
            };
            book.observe_among(&p.key, &obs, same);
            match ratio {
                Some(r) if done.probe => book.record_probe(&p.key, p.stratum, r, self.now_s()),
                Some(r) => book.record_ratio(&p.key, p.stratum, r, self.now_s()),
                None => {}
            }
        }
    }

    /// Claims a probe on `member` for `model` now: true when no ratio or
    /// probe of it came for
    /// [`PROBE_AFTER_S`](llamatap_policy::ttft::PROBE_AFTER_S) seconds (see
    /// [`Calibration::claim_probe`](llamatap_policy::ttft::Calibration::claim_probe)).
    pub fn claim_probe(&self, fleet: &Fleet, member: usize, model: Option<&str>) -> bool {
        let now = self.now_s();
        let key = key(fleet, member, model);
        self.book.lock().is_ok_and(|mut b| b.claim_probe(&key, now))
    }

    /// `key`'s calibration factor for a request dispatched into `stratum`:
    /// the high quantile of its recent measured over predicted TTFTs of that
    /// kind of load, 1 when none is held.
    pub fn factor(&self, key: &Key, stratum: Stratum) -> f64 {
        let Ok(book) = self.book.lock() else {
            return 1.0;
        };
        book.ratios(key)
            .and_then(|r| r.factor(stratum, self.now_s()))
            .map_or(1.0, |(f, _)| f)
    }
}

/// `member`'s restarts: the process an answer came from, whose floor it
/// teaches (0 for a member that left).
pub(super) fn restarts(fleet: &Fleet, member: usize) -> u32 {
    fleet.member(member).map_or(0, |m| m.restarts())
}
