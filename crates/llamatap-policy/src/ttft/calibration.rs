//! A calibrated upper bound on a prediction, in the manner of split
//! conformal prediction: the prediction times a high quantile of the
//! measured over predicted TTFT ratios this member and model showed lately.
//!
//! The record ([`Ratios`]) is a ring of the last [`WINDOW`] ratios (4 bytes
//! each, no allocation). The factor is the conformal rank
//! `⌈(n + 1) · COVERAGE⌉` of the `n` ratios held (the largest while fewer
//! than 99 are held: a finite bound cannot promise 99 % from fewer), found
//! by a selection over a copy, O(n) with `n` at most [`WINDOW`]. If the
//! ratios to come are exchangeable with those held, a request's measured
//! TTFT is within its bound with probability at least `COVERAGE` (with a
//! full window). Until [`MIN_RATIOS`] are held the bound is of low
//! confidence: it may leave a member out in favour of another, never refuse
//! a request.
//!
//! The trade-off: a higher coverage or a longer window gives larger bounds
//! (more requests refused or sent elsewhere, fewer admitted ones late); a
//! shorter window follows a change of speed sooner but holds fewer ratios
//! above the quantile, so its bound is noisier.
//!
//! Deliberately not here: measuring a ratio (the caller divides the TTFT it
//! measured by the prediction it made), and any verdict by the bound.

use super::{Confidence, Estimate};

/// Ratios held per member and model: the last 128 (at one answer a second
/// on a member, about two minutes).
pub const WINDOW: usize = 128;
/// The share of requests whose measured TTFT should fall within the bound.
pub const COVERAGE: f64 = 0.99;
/// Ratios needed before a bound is of high confidence.
pub const MIN_RATIOS: usize = 16;
/// A ratio is taken in within `1/RATIO_LIMIT..=RATIO_LIMIT` (one wild
/// measurement cannot make every bound infinite).
const RATIO_LIMIT: f64 = 64.0;

/// The last [`WINDOW`] measured over predicted TTFT ratios of one member
/// and model.
#[derive(Debug, Clone, Copy)]
pub struct Ratios {
    ring: [f32; WINDOW],
    /// Where the next ratio goes.
    next: usize,
    /// Ratios held (at most [`WINDOW`]).
    len: usize,
}

impl Default for Ratios {
    fn default() -> Self {
        Ratios {
            ring: [0.0; WINDOW],
            next: 0,
            len: 0,
        }
    }
}

/// A prediction's calibrated upper bound.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    /// The bound on the TTFT: the prediction times `factor`, ms.
    pub ttft_ms: f64,
    /// The factor: the quantile of the recent ratios (1 with none).
    pub factor: f64,
    /// Ratios the factor was taken from.
    pub ratios: usize,
    /// The bare prediction.
    pub estimate: Estimate,
    /// High only when the prediction is and [`MIN_RATIOS`] ratios are held.
    pub confidence: Confidence,
    /// The least TTFT the member could take, whatever its confidence: half
    /// its fastest decode step and least overhead seen
    /// ([`FLOOR_SHARE`](super::FLOOR_SHARE)); `None` before either was
    /// seen (and from [`Ratios::bound`], which knows no member).
    pub floor_ms: Option<f64>,
}

impl Ratios {
    /// Records the ratio of a measured TTFT to its prediction; one not
    /// finite or not above 0 is ignored, others are clamped to a factor of
    /// 64 either way.
    pub fn push(&mut self, ratio: f64) {
        if !ratio.is_finite() || ratio <= 0.0 {
            return;
        }
        let r = ratio.clamp(1.0 / RATIO_LIMIT, RATIO_LIMIT) as f32;
        if let Some(slot) = self.ring.get_mut(self.next) {
            *slot = r;
        }
        self.next = (self.next + 1) % WINDOW;
        self.len = (self.len + 1).min(WINDOW);
    }

    /// Records the ratio of a probe (a request admitted though the bound
    /// refused, `strata.rs`): in place of the largest ratio held when it is
    /// lower, else as [`Ratios::push`]. The largest is what refused; a
    /// probe that came in under it says the member is no longer that slow.
    pub fn push_probe(&mut self, ratio: f64) {
        let largest = self
            .held()
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, r)| (i, f64::from(*r)));
        match largest {
            Some((i, max)) if ratio.is_finite() && ratio > 0.0 && ratio < max => {
                if let Some(slot) = self.ring.get_mut(i) {
                    *slot = ratio.max(1.0 / RATIO_LIMIT) as f32;
                }
            }
            _ => self.push(ratio),
        }
    }

    /// Ratios held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The ratios held, in no particular order.
    pub fn held(&self) -> &[f32] {
        self.ring.get(..self.len).unwrap_or(&[])
    }

    /// The conformal quantile for `coverage` (in 0..=1): the
    /// `⌈(n + 1) · coverage⌉`-th smallest of the `n` ratios held, the
    /// largest when that rank is past `n`; `None` with none held.
    pub fn quantile(&self, coverage: f64) -> Option<f64> {
        quantile_of(&[self.held()], coverage)
    }

    /// The bound on `estimate`: times the [`COVERAGE`] quantile (1 with no
    /// ratio held); of high confidence only when `estimate` is and
    /// [`MIN_RATIOS`] are held.
    pub fn bound(&self, estimate: Estimate) -> Bound {
        let factor = self.quantile(COVERAGE).unwrap_or(1.0);
        let sure = estimate.confidence == Confidence::High && self.len >= MIN_RATIOS;
        Bound {
            ttft_ms: estimate.ttft_ms * factor,
            factor,
            ratios: self.len,
            estimate,
            confidence: if sure {
                Confidence::High
            } else {
                Confidence::Low
            },
            floor_ms: None,
        }
    }
}

/// [`Ratios::quantile`] over the ratios of `parts` taken together (at most
/// two rings' worth; any beyond are left out).
pub fn quantile_of(parts: &[&[f32]], coverage: f64) -> Option<f64> {
    let mut copy = [0.0f32; 2 * WINDOW];
    let mut n = 0;
    for part in parts {
        let room = copy.len() - n;
        let take = part.len().min(room);
        if let (Some(to), Some(from)) = (copy.get_mut(n..n + take), part.get(..take)) {
            to.copy_from_slice(from);
            n += take;
        }
    }
    let held = copy.get_mut(..n).filter(|h| !h.is_empty())?;
    let wanted = ((n + 1) as f64 * coverage.clamp(0.0, 1.0)).ceil() as usize;
    let rank = wanted.clamp(1, n);
    let (_, kth, _) = held.select_nth_unstable_by(rank - 1, f32::total_cmp);
    Some(f64::from(*kth))
}

#[cfg(test)]
mod tests;
