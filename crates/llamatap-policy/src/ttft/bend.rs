//! How a member's speed bends with the number of other busy slots: a factor
//! (≥ 1) by which a prefill, or a decode step, is slower when `b` other slots
//! are busy than on an idle member.
//!
//! llama-server puts every busy slot's work in one batch per step: a prefill
//! shares each ubatch with the other slots' decode tokens (and with their
//! prefills), and a decode step computes one token per busy slot. So the
//! factor grows with `b`; how much depends on the hardware, and is learned.
//!
//! One bucket per count of other busy slots, `0..BUCKETS` (the last holds
//! every larger count), each a decayed mean of the logarithm of the measured
//! factor. A bucket never seen is extrapolated linearly from those seen
//! (`1 + k·b`, `k` their weighted mean slope), and the factor used is the
//! running maximum over buckets `≤ b`: monotone in `b` whatever the noise.
//!
//! Deliberately not here: what the factor multiplies (`member.rs`).

/// Buckets of other busy slots: `0..BUCKETS − 1` exactly, the last for more.
pub const BUCKETS: usize = 8;

/// Weight a bucket needs before its own mean is used rather than the
/// extrapolation.
const SEEN: f64 = 0.5;

/// A factor per count of other busy slots.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Bend {
    /// Decayed Σ w·ln(factor) per bucket (bucket 0 is 1 by definition).
    log_sum: [f64; BUCKETS],
    /// Decayed Σ w per bucket.
    weight: [f64; BUCKETS],
}

impl Bend {
    /// The bucket of `busy` other slots.
    fn bucket(busy: u32) -> usize {
        (busy as usize).min(BUCKETS - 1)
    }

    /// Whether a bucket's own measurements back the factor at `busy`.
    pub(super) fn seen(&self, busy: u32) -> bool {
        let b = Self::bucket(busy);
        b == 0 || self.weight[b] >= SEEN
    }

    /// Adds one measured factor at `busy` other slots (clamped to 1/4..=16,
    /// so one wild value cannot move the mean far), fading that bucket's
    /// past by `decay`.
    pub(super) fn add(&mut self, busy: u32, factor: f64, decay: f64) {
        let b = Self::bucket(busy);
        if b == 0 || !factor.is_finite() || factor <= 0.0 {
            return;
        }
        let f = factor.clamp(0.25, 16.0);
        self.log_sum[b] = self.log_sum[b] * decay + f.ln();
        self.weight[b] = self.weight[b] * decay + 1.0;
    }

    /// Each bucket's weight cut to at most `most`, its mean kept.
    pub(super) fn faded_to(mut self, most: f64) -> Bend {
        for (sum, w) in self.log_sum.iter_mut().zip(self.weight.iter_mut()) {
            let keep = if *w > most { most / *w } else { 1.0 };
            *sum *= keep;
            *w *= keep;
        }
        self
    }

    /// The mean factor a bucket measured, if it has.
    fn own(&self, b: usize) -> Option<f64> {
        (self.weight[b] >= SEEN).then(|| (self.log_sum[b] / self.weight[b]).exp())
    }

    /// The extrapolation slope: the weighted mean of `(factor − 1)/b` over
    /// the buckets seen, never negative.
    fn slope(&self) -> f64 {
        let (mut num, mut den) = (0.0, 0.0);
        for b in 1..BUCKETS {
            if let Some(f) = self.own(b) {
                num += self.weight[b] * (f - 1.0) / b as f64;
                den += self.weight[b];
            }
        }
        if den > 0.0 {
            (num / den).max(0.0)
        } else {
            0.0
        }
    }

    /// The factor at `busy` other slots: ≥ 1, non-decreasing in `busy`,
    /// finite. Beyond the last bucket it keeps growing by the slope.
    pub(super) fn at(&self, busy: u32) -> f64 {
        let slope = self.slope();
        let top = Self::bucket(busy);
        let mut f = 1.0f64;
        for b in 1..=top {
            let here = self.own(b).unwrap_or(1.0 + slope * b as f64);
            f = f.max(here);
        }
        let beyond = busy.saturating_sub((BUCKETS - 1) as u32) as f64;
        let out = f + slope * beyond;
        if out.is_finite() {
            out
        } else {
            1.0
        }
    }
}
