//! A new member's start: what a peer (another member serving the same
//! model) learned, faded to the weight of one answer, and scaled through
//! the member's own first prefill.
//!
//! One answer cannot tell a prefill's fixed cost from its cost per token:
//! fitted alone, a first prompt of 33 tokens made a 415-token prompt five
//! to ten times too long. A peer's curve has a shape; the member's first
//! prefill sets its speed (the curve is scaled to pass through it, the
//! level starts at 0), and its later answers the shape, as they would
//! from nothing (the peer's curve weighs as [`FIT_WEIGHT`] prefill, each
//! new one as 1, and the weights decay alike). The cost: a member whose
//! curve has another shape than its peer's (another kind of hardware) is
//! predicted by the peer's shape until a few answers of spread sizes
//! correct it (in the tests, 40 % short at 700 tokens after a first
//! prompt of 90, 7 % after three answers). The means (decode rate,
//! overhead, answer length, ...) weigh as [`MEAN_WEIGHT`] answer. The
//! peer's answers count for nothing: the member's confidence stays low
//! until its own answers make it high, and its calibration starts empty.
//!
//! Deliberately not here: choosing the peer (the book, `ttft.rs`).

use super::{Floor, Mean, Rates};

/// Answers a peer must have learned from to be started from: a curve of
/// fewer is little more than a guess itself.
pub const PEER_ANSWERS: u32 = 8;
/// The weight of the peer's prefill curve in the new member's fit, in
/// prefills.
const FIT_WEIGHT: f64 = 1.0;
/// The weight of each of the peer's means (decode rate, overhead, answer
/// length, ...), in answers.
const MEAN_WEIGHT: f64 = 1.0;

impl Rates {
    /// What a new member serving the same model starts from: these rates,
    /// faded, with no answer of its own.
    pub(in crate::ttft) fn as_prior(&self) -> Rates {
        let mut prefill = self.prefill;
        if prefill.weight() > FIT_WEIGHT {
            prefill.fade(FIT_WEIGHT / prefill.weight());
        }
        let m = |mean: Mean| mean.faded_to(MEAN_WEIGHT);
        Rates {
            prefill,
            prefill_bend: self.prefill_bend.faded_to(MEAN_WEIGHT),
            decode: m(self.decode),
            decode_bend: self.decode_bend.faded_to(MEAN_WEIGHT),
            answer_tokens: m(self.answer_tokens),
            used: m(self.used),
            prefill_typical: m(self.prefill_typical),
            overhead: m(self.overhead),
            lead: m(self.lead),
            bytes: self.bytes.faded_to(FIT_WEIGHT),
            head: m(self.head),
            share: m(self.share),
            noise: m(self.noise),
            // A peer's floor may be above this member's: its own only.
            floor: Floor::default(),
            level: self.level,
            observations: 0,
            borrowed: true,
        }
    }

    /// Scales a borrowed curve (with its level) through the member's first
    /// prefill: `ms` (on an idle member) for `new` tokens after `cached`.
    pub(super) fn scale_to(&mut self, new: f64, cached: f64, ms: f64) {
        let curve = self.prefill.at(new, cached);
        if curve > 0.0 && ms > 0.0 && ms.is_finite() {
            self.prefill.scale(ms / curve);
            self.level = 0.0;
        }
    }
}
