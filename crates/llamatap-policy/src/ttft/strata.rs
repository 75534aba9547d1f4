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
//! A refused request adds no ratio, so a bound that refuses every request
//! would never learn that the member got faster. Two ways out:
//! - **a probe**: when neither a ratio nor a probe came for
//!   [`PROBE_AFTER_S`], the caller may admit one request the bound refuses
//!   ([`Calibration::claim_probe`]); its ratio takes the place of the
//!   largest held when it is lower ([`Calibration::push_probe`]), so each
//!   probe that comes in faster removes one ratio of the slow spell that
//!   refused, and one that comes in as slow changes nothing but the wait
//!   for the next probe, which doubles up to [`PROBE_GAP_MAX_S`] (a member
//!   that stays slow costs one late request every few minutes, not every
//!   ten seconds);
//! - **forgetting**: a kind whose newest ratio is older than [`MAX_AGE_S`]
//!   is forgotten; the bound is unsure again, and requests are admitted
//!   until it is calibrated anew.
//!
//! Time is the caller's: whole seconds from any origin.
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

/// Seconds after a kind's newest ratio at which its ratios are forgotten.
pub const MAX_AGE_S: u32 = 300;
/// Seconds without a new ratio (of either kind) or probe after which a
/// member whose bound refuses may admit one request as a probe.
pub const PROBE_AFTER_S: u32 = 10;
/// The longest wait for the next probe, after probes that came in as slow
/// as the slowest ratio held (each doubles the wait from
/// [`PROBE_AFTER_S`]).
pub const PROBE_GAP_MAX_S: u32 = 160;

/// A member and model's ratios, by [`Stratum`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Calibration {
    alone: Ratios,
    shared: Ratios,
    /// When each kind's newest ratio came (the caller's seconds).
    alone_at: u32,
    shared_at: u32,
    /// When the last probe was claimed.
    probed_at: u32,
    /// Seconds from the newest ratio or probe to the next probe; 0 for
    /// [`PROBE_AFTER_S`].
    probe_gap_s: u32,
}

impl Calibration {
    /// The ratios of one kind still held at `now_s` (none once forgotten).
    pub fn of(&self, stratum: Stratum, now_s: u32) -> Option<&Ratios> {
        let (r, at) = match stratum {
            Stratum::Alone => (&self.alone, self.alone_at),
            Stratum::Shared => (&self.shared, self.shared_at),
        };
        (now_s.saturating_sub(at) <= MAX_AGE_S && !r.is_empty()).then_some(r)
    }

    /// Records, at `now_s`, the ratio of a request dispatched into
    /// `stratum` (the kind's ratios forgotten first if they were).
    /// A ratio puts the next probe's wait back to [`PROBE_AFTER_S`].
    pub fn push(&mut self, stratum: Stratum, ratio: f64, now_s: u32) {
        self.probe_gap_s = 0;
        self.push_ratio(stratum, ratio, now_s);
    }

    /// [`Calibration::push`], the probe's wait left alone.
    fn push_ratio(&mut self, stratum: Stratum, ratio: f64, now_s: u32) {
        let fresh = self.of(stratum, now_s).is_some();
        let (r, at) = match stratum {
            Stratum::Alone => (&mut self.alone, &mut self.alone_at),
            Stratum::Shared => (&mut self.shared, &mut self.shared_at),
        };
        if !fresh {
            *r = Ratios::default();
        }
        r.push(ratio);
        *at = (*at).max(now_s);
    }

    /// Claims a probe at `now_s`: true when neither a ratio nor a probe
    /// came in the last [`PROBE_AFTER_S`] seconds, or longer after probes
    /// as slow as the slowest ratio (see [`Calibration::probe_gap_s`]; the
    /// next claim is then due that long after this one).
    pub fn claim_probe(&mut self, now_s: u32) -> bool {
        let last = self.alone_at.max(self.shared_at).max(self.probed_at);
        if now_s.saturating_sub(last) < self.probe_gap_s() {
            return false;
        }
        self.probed_at = now_s;
        true
    }

    /// Records, at `now_s`, the ratio of a probe dispatched into `stratum`:
    /// in place of the largest ratio the kind's factor is taken from (its
    /// own kind's, or both pooled while it holds fewer than
    /// [`MIN_RATIOS`]) when it is lower ([`Ratios::push_probe`]; the next
    /// probe's wait goes back to [`PROBE_AFTER_S`]), else as
    /// [`Calibration::push`] with the next probe's wait doubled (at most
    /// [`PROBE_GAP_MAX_S`]). One not finite or not above 0 is ignored.
    pub fn push_probe(&mut self, stratum: Stratum, ratio: f64, now_s: u32) {
        if !(ratio.is_finite() && ratio > 0.0) {
            return;
        }
        let own = self.of(stratum, now_s).map_or(0, Ratios::len);
        let other = match stratum {
            Stratum::Alone => Stratum::Shared,
            Stratum::Shared => Stratum::Alone,
        };
        let largest = |k| {
            self.of(k, now_s)
                .and_then(|r| r.quantile(1.0))
                .unwrap_or(0.0)
        };
        let at = if own < MIN_RATIOS && largest(other) > largest(stratum) {
            other
        } else {
            stratum
        };
        if ratio >= largest(at) {
            self.probe_gap_s = self.probe_gap_s().saturating_mul(2).min(PROBE_GAP_MAX_S);
            return self.push_ratio(stratum, ratio, now_s);
        }
        self.probe_gap_s = 0;
        let (r, when) = match at {
            Stratum::Alone => (&mut self.alone, &mut self.alone_at),
            Stratum::Shared => (&mut self.shared, &mut self.shared_at),
        };
        r.push_probe(ratio);
        *when = (*when).max(now_s);
    }

    /// Seconds from the newest ratio or probe to the next probe.
    pub fn probe_gap_s(&self) -> u32 {
        if self.probe_gap_s == 0 {
            PROBE_AFTER_S
        } else {
            self.probe_gap_s
        }
    }

    /// Ratios held at `now_s`, both kinds.
    pub fn len(&self, now_s: u32) -> usize {
        [Stratum::Alone, Stratum::Shared]
            .into_iter()
            .filter_map(|k| self.of(k, now_s))
            .map(Ratios::len)
            .sum()
    }

    /// The [`COVERAGE`] quantile at `now_s` for a request of `stratum` (its
    /// own kind's once it holds [`MIN_RATIOS`], else both pooled) and the
    /// ratios it was taken from; `None` with none held.
    pub fn factor(&self, stratum: Stratum, now_s: u32) -> Option<(f64, usize)> {
        if let Some(own) = self.of(stratum, now_s).filter(|r| r.len() >= MIN_RATIOS) {
            return own.quantile(COVERAGE).map(|q| (q, own.len()));
        }
        let held = |k| self.of(k, now_s).map_or(&[][..], Ratios::held);
        let q = quantile_of(&[held(Stratum::Alone), held(Stratum::Shared)], COVERAGE)?;
        Some((q, self.len(now_s)))
    }

    /// The bound at `now_s` on `estimate` for a request of `stratum`: times
    /// [`Calibration::factor`] (1 with no ratio held); of high confidence
    /// only when `estimate` is and the factor came from [`MIN_RATIOS`].
    pub fn bound(&self, estimate: Estimate, stratum: Stratum, now_s: u32) -> Bound {
        let (factor, ratios) = self.factor(stratum, now_s).unwrap_or((1.0, 0));
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
            floor_ms: None,
        }
    }
}

#[cfg(test)]
mod tests;
