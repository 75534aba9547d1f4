//! A decayed mean with a bounded weight: the member's rates other than its
//! prefill curve and bends.
//!
//! Deliberately not here: what each mean holds (`member.rs`).

use super::{CLIP, MEAN_DECAY};

/// A decayed mean with a bounded weight.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Mean {
    sum: f64,
    weight: f64,
}

impl Mean {
    pub(super) fn add(&mut self, x: f64) {
        if x.is_finite() {
            self.sum = self.sum * MEAN_DECAY + x;
            self.weight = self.weight * MEAN_DECAY + 1.0;
        }
    }

    pub(super) fn get(&self) -> Option<f64> {
        (self.weight > 0.0).then(|| self.sum / self.weight)
    }

    /// `x` clipped to `1/CLIP..=CLIP` times the mean (plus `slack`), once
    /// the mean has some weight.
    pub(super) fn clip(&self, x: f64, slack: f64) -> f64 {
        match self.get() {
            Some(m) if self.weight >= 2.0 => x.clamp(m / CLIP - slack, m * CLIP + slack),
            _ => x,
        }
    }

    /// Adds `x` (≥ 0) to the mean of a fixed cost, whose noise only adds
    /// (a wait, a cold start): clipped as [`Mean::clip`] once the mean has
    /// weight; before that, a value under `1/CLIP` of the mean (less
    /// `slack`) starts it anew, since what came before was such noise. A
    /// llama-server's first request can take a hundred times its usual
    /// overhead, and the clip alone would then need a dozen requests to
    /// bring the mean down.
    pub(super) fn add_cost(&mut self, x: f64, slack: f64) {
        let x = x.max(0.0);
        match self.get() {
            Some(m) if self.weight < 2.0 && x < m / CLIP - slack => *self = Mean::default(),
            _ => {}
        }
        self.add(self.clip(x, slack));
    }

    /// Adds a fixed cost `x` (≥ 0 ms) to a mean of `ln(1 + x)`, read by
    /// [`Mean::get_cost`]: the cost's typical value, which the long tail of
    /// its noise (a scheduling delay now and then) does not pull up as it
    /// does an arithmetic mean. Clipped as [`Mean::clip`], in ms, once the
    /// mean has some weight; before that, a value under `1/CLIP` of the
    /// typical cost starts it anew (a cold start's cost, left behind).
    pub(super) fn add_log_cost(&mut self, x: f64, slack: f64) {
        let x = x.max(0.0);
        if matches!(self.get_cost(), Some(m) if self.weight < 2.0 && x < m / CLIP) {
            *self = Mean::default();
        }
        let x = match self.get_cost() {
            Some(m) if self.weight >= 2.0 => x.clamp(m / CLIP - slack, m * CLIP + slack),
            _ => x,
        };
        self.add(x.max(0.0).ln_1p());
    }

    /// The typical cost of a mean fed by [`Mean::add_log_cost`], ms.
    pub(super) fn get_cost(&self) -> Option<f64> {
        self.get().map(f64::exp_m1)
    }

    /// The same mean, its weight cut to at most `most`.
    pub(super) fn faded_to(self, most: f64) -> Mean {
        if self.weight <= most {
            return self;
        }
        let k = most / self.weight;
        Mean {
            sum: self.sum * k,
            weight: self.weight * k,
        }
    }
}
