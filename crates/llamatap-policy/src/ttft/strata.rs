//! The calibrated bound by load, in the manner of Mondrian conformal
//! prediction: a member's ratios of measured over predicted TTFT are kept
//! apart for requests dispatched **alone** (no other request on the
//! member, nothing queued) and **shared** (others in flight or queued), and
//! a request is bounded by the ratios of its own kind.
//!
//! A prediction made alone misses by what the machine does; one made beside
//! other answers also misses by what it cannot see (which slot's prompt
//! goes first in a batch, a prompt sent a moment later). Pooled, one slow
//! answer under load sets the bound of every idle request after it for
//! [`WINDOW`](super::WINDOW) answers. Apart, each kind's bound covers its
//! own ratios, with the same guarantee if the ratios of one kind are
//! exchangeable.
//!
//! While a kind holds fewer than [`MIN_RATIOS`], its bound is taken from
//! both kinds pooled, as if there were no split (so a member calibrated
//! alone can still refuse its first requests under load).
//!
//! Deliberately not here: the ring and its quantile (`calibration.rs`), and
//! any verdict by the bound.

use super::calibration::{quantile_of, Bound, Ratios, COVERAGE, MIN_RATIOS};
use super::{Confidence, Estimate, Load};

/// The kind of load a request was dispatched into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Stratum {
    /// No other request in flight on the member and nothing queued ahead.
    #[default]
    Alone,
    /// Other requests in flight on the member, or queued ahead.
    Shared,
}

impl Stratum {
    /// The kind of `load`.
    pub fn of(load: &Load<'_>) -> Stratum {
        if load.busy == 0 && load.queue_ahead == 0 {
            Stratum::Alone
        } else {
            Stratum::Shared
        }
    }
}

/// A member and model's ratios, by [`Stratum`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Calibration {
    alone: Ratios,
    shared: Ratios,
}

impl Calibration {
    /// The ratios of one kind.
    pub fn of(&self, stratum: Stratum) -> &Ratios {
        match stratum {
            Stratum::Alone => &self.alone,
            Stratum::Shared => &self.shared,
        }
    }

    /// Records the ratio of a request dispatched into `stratum`.
    pub fn push(&mut self, stratum: Stratum, ratio: f64) {
        match stratum {
            Stratum::Alone => self.alone.push(ratio),
            Stratum::Shared => self.shared.push(ratio),
        }
    }

    /// Ratios held, both kinds.
    pub fn len(&self) -> usize {
        self.alone.len() + self.shared.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The [`COVERAGE`] quantile for a request of `stratum` (its own kind's
    /// once it holds [`MIN_RATIOS`], else both pooled) and the ratios it was
    /// taken from; `None` with none held.
    pub fn factor(&self, stratum: Stratum) -> Option<(f64, usize)> {
        let own = self.of(stratum);
        if own.len() >= MIN_RATIOS {
            return own.quantile(COVERAGE).map(|q| (q, own.len()));
        }
        let q = quantile_of(&[self.alone.held(), self.shared.held()], COVERAGE)?;
        Some((q, self.len()))
    }

    /// The bound on `estimate` for a request of `stratum`: times
    /// [`Calibration::factor`] (1 with no ratio held); of high confidence
    /// only when `estimate` is and the factor came from [`MIN_RATIOS`].
    pub fn bound(&self, estimate: Estimate, stratum: Stratum) -> Bound {
        let (factor, ratios) = self.factor(stratum).unwrap_or((1.0, 0));
        let sure = estimate.confidence == Confidence::High && ratios >= MIN_RATIOS;
        Bound {
            ttft_ms: estimate.ttft_ms * factor,
            factor,
            ratios,
            estimate,
            confidence: if sure {
                Confidence::High
            } else {
                Confidence::Low
            },
        }
    }
}

#[cfg(test)]
mod tests;
