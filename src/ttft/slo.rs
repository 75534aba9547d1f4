//! A TTFT objective against the calibrated bounds of the members that can
//! serve a request: which members to leave out, or a refusal at once.
//!
//! Each member is judged by its [`Bound`]: its prediction times a high
//! quantile of its recent measured over predicted ratios
//! ([`llamatap_policy::ttft::Ratios`]), not by the bare prediction; a
//! bound is of [`Confidence::High`] only when the prediction is and enough
//! ratios are known.
//!
//! - Members whose bound (any confidence) is over the objective are left out
//!   when at least one other is predicted within it or has no data: the
//!   router then chooses among the rest as it would (so its own choice is
//!   kept when it meets the objective, and cache affinity and queueing are
//!   weighed through the prediction of each).
//! - When every member's bound is over it, the request is refused only
//!   if each of those bounds is sure: of [`Confidence::High`], or from a
//!   member whose error is calibrated ([`MIN_RATIOS`] ratios) though its
//!   prediction is of low confidence (a load never measured). Otherwise
//!   it is admitted, leaving out only the members surely over it (so that
//!   the unsure ones go on learning), and the verdict says so
//!   ([`Verdict::Unsure`]).
//! - Whatever the confidence, a member whose floor ([`Bound::floor_ms`]:
//!   half the fastest decode step and least overhead it was seen to take)
//!   is over the objective is surely over it; when every member's is, the
//!   request is refused ([`Verdict::BelowFloor`]): an objective of 1 ms is
//!   refused once each member answered once, not after the twenty answers
//!   a sure bound takes.
//!
//! Pure: no clock, no I/O. Deliberately not here: pausing a running
//! answer to make room and probing a member over the objective on its
//! recent error alone (the proxy's `predict`), and the refusal's wording
//! (`crate::proxy`).

use llamatap_policy::ttft::{Bound, Confidence, MIN_RATIOS};

/// What an objective decides for a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Some member's bound is within the objective (or it has no data):
    /// leave out `avoid`.
    Meets {
        /// Members whose bound is over the objective.
        avoid: Vec<usize>,
    },
    /// No member's bound is within it, but some bound is of low
    /// confidence: admit, leaving out the members surely over it.
    Unsure {
        /// The members whose bound is over it with high confidence.
        avoid: Vec<usize>,
        /// The fastest member's bound, ms.
        best_ms: f64,
    },
    /// Every member's bound is over it with high confidence: refuse.
    Unattainable {
        /// The fastest member (the lowest bound) and its bound, ms.
        best: (usize, f64),
    },
    /// It is below every member's floor: refuse, whatever the confidence
    /// (no pause nor probe could meet it).
    BelowFloor {
        /// The fastest member (the lowest bound) and its bound, ms.
        best: (usize, f64),
        /// The lowest of the members' floors, ms.
        floor_ms: f64,
    },
}

impl Verdict {
    /// The members to leave out when routing.
    pub fn avoid(&self) -> &[usize] {
        match self {
            Verdict::Meets { avoid } | Verdict::Unsure { avoid, .. } => avoid,
            Verdict::Unattainable { .. } | Verdict::BelowFloor { .. } => &[],
        }
    }
}

/// The verdict of an objective of `slo_ms` over each serving member's
/// bound (`None`: no data); `None` when there is no member to judge.
pub fn judge(slo_ms: u32, members: &[(usize, Option<Bound>)]) -> Option<Verdict> {
    let slo = f64::from(slo_ms);
    let mut avoid = Vec::new();
    let mut surely_over = Vec::new();
    let mut meets = false;
    let mut sure = true;
    let mut best: Option<(usize, f64)> = None;
    // The lowest floor, while every member's is over the objective.
    let mut floored = Some(f64::INFINITY);
    for &(m, p) in members {
        match p {
            None => {
                meets = true;
                sure = false;
                floored = None;
            }
            Some(e) => {
                let under = below_floor(slo_ms, &e);
                if e.ttft_ms <= slo && !under {
                    meets = true;
                } else {
                    avoid.push(m);
                }
                if under || (calibrated(e) && e.ttft_ms > slo) {
                    surely_over.push(m);
                } else if !calibrated(e) {
                    sure = false;
                }
                floored = match (floored, e.floor_ms) {
                    (Some(low), Some(f)) if under => Some(low.min(f)),
                    _ => None,
                };
                if best.is_none_or(|(_, b)| e.ttft_ms < b) {
                    best = Some((m, e.ttft_ms));
                }
            }
        }
    }
    if members.is_empty() {
        return None;
    }
    if meets {
        return Some(Verdict::Meets { avoid });
    }
    let best = best?;
    if let Some(floor_ms) = floored {
        return Some(Verdict::BelowFloor { best, floor_ms });
    }
    if sure {
        return Some(Verdict::Unattainable { best });
    }
    Some(Verdict::Unsure {
        avoid: surely_over,
        best_ms: best.1,
    })
}

/// Whether an objective of `slo_ms` is below `b`'s floor: its member could
/// not meet it whatever the confidence ([`Bound::floor_ms`]).
pub fn below_floor(slo_ms: u32, b: &Bound) -> bool {
    b.floor_ms.is_some_and(|f| f64::from(slo_ms) < f)
}

/// Whether `b` can refuse: of high confidence, or its member's error is
/// calibrated ([`MIN_RATIOS`] ratios held) though its prediction is of low
/// confidence (a load the member was never measured at): the recent error
/// then covers part of the guess, and a request admitted on a bound over
/// its objective would most likely be late.
fn calibrated(b: Bound) -> bool {
    b.confidence == Confidence::High || b.ratios >= MIN_RATIOS
}

/// A request's objective: its `x-slo-ttft-ms` header when valid, else
/// `default`. `Err` carries the reason a present header is refused.
///
/// Valid: a number of milliseconds above 0 and at most `u32::MAX`, as
/// text; a fraction (`250.5`, `500.0`, as clients that read the header as
/// a float send it) is rounded up to the next whole millisecond.
pub fn objective(header: Option<&[u8]>, default: Option<u32>) -> Result<Option<u32>, String> {
    let Some(raw) = header else {
        return Ok(default);
    };
    let text = std::str::from_utf8(raw).map_err(|_| "x-slo-ttft-ms is not text".to_string())?;
    let trimmed = text.trim();
    let ms = trimmed
        .parse::<u32>()
        .ok()
        .or_else(|| whole_ms(trimmed.parse::<f64>().ok()?));
    match ms {
        Some(ms) if ms > 0 => Ok(Some(ms)),
        _ => Err(format!(
            "x-slo-ttft-ms must be a number of milliseconds above 0; got {:?}",
            llamatap_wire::text::bounded(text, 32)
        )),
    }
}

/// `ms` rounded up to a whole millisecond, when above 0 and within `u32`.
fn whole_ms(ms: f64) -> Option<u32> {
    let up = ms.ceil();
    (up >= 1.0 && up <= f64::from(u32::MAX)).then(|| {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let whole = up as u32;
        whole
    })
}

#[cfg(test)]
mod tests;
