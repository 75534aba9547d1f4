//! A TTFT objective against the predictions of the members that can serve
//! a request: which members to leave out, or a refusal at once.
//!
//! - Members predicted (any confidence) over the objective are left out
//!   when at least one other is predicted within it or has no data: the
//!   router then chooses among the rest as it would (so its own choice is
//!   kept when it meets the objective, and cache affinity and queueing are
//!   weighed through the prediction of each).
//! - When every member is predicted over it, the request is refused only
//!   if each of those predictions is of [`Confidence::High`]; otherwise it
//!   is admitted, leaving out only the members surely over it (so that
//!   the unsure ones go on learning), and the verdict says so
//!   ([`Verdict::Unsure`]).
//!
//! Pure: no clock, no I/O. Deliberately not here: pausing a running
//! answer to make room (not done), and the refusal's wording
//! (`crate::proxy`).

use llamatap_policy::ttft::{Confidence, Prediction};

/// What an objective decides for a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Some member is predicted within the objective (or has no data):
    /// leave out `avoid`.
    Meets {
        /// Members predicted over the objective.
        avoid: Vec<usize>,
    },
    /// No member is predicted within it, but some prediction is of low
    /// confidence: admit, leaving out the members surely over it.
    Unsure {
        /// The members predicted over it with high confidence.
        avoid: Vec<usize>,
        /// The fastest member's prediction, ms.
        best_ms: f64,
    },
    /// Every member is predicted over it with high confidence: refuse.
    Unattainable {
        /// The fastest member and its prediction, ms.
        best: (usize, f64),
    },
}

impl Verdict {
    /// The members to leave out when routing.
    pub fn avoid(&self) -> &[usize] {
        match self {
            Verdict::Meets { avoid } | Verdict::Unsure { avoid, .. } => avoid,
            Verdict::Unattainable { .. } => &[],
        }
    }
}

/// The verdict of an objective of `slo_ms` over each serving member's
/// prediction; `None` when there is no member to judge.
pub fn judge(slo_ms: u32, members: &[(usize, Prediction)]) -> Option<Verdict> {
    let slo = f64::from(slo_ms);
    let mut avoid = Vec::new();
    let mut surely_over = Vec::new();
    let mut meets = false;
    let mut sure = true;
    let mut best: Option<(usize, f64)> = None;
    for &(m, p) in members {
        match p {
            Prediction::NoData => {
                meets = true;
                sure = false;
            }
            Prediction::Estimate(e) => {
                if e.ttft_ms <= slo {
                    meets = true;
                } else {
                    avoid.push(m);
                }
                if e.confidence != Confidence::High {
                    sure = false;
                } else if e.ttft_ms > slo {
                    surely_over.push(m);
                }
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
    if sure {
        return Some(Verdict::Unattainable { best });
    }
    Some(Verdict::Unsure {
        avoid: surely_over,
        best_ms: best.1,
    })
}

/// A request's objective: its `x-slo-ttft-ms` header when valid (an
/// integer of milliseconds, 1 or more), else `default`. `Err` carries the
/// reason a present header is refused.
pub fn objective(header: Option<&[u8]>, default: Option<u32>) -> Result<Option<u32>, String> {
    let Some(raw) = header else {
        return Ok(default);
    };
    let text = std::str::from_utf8(raw).map_err(|_| "x-slo-ttft-ms is not text".to_string())?;
    match text.trim().parse::<u32>() {
        Ok(0) | Err(_) => Err(format!(
            "x-slo-ttft-ms must be a whole number of milliseconds, 1 or more; got {:?}",
            llamatap_wire::text::bounded(text, 32)
        )),
        Ok(ms) => Ok(Some(ms)),
    }
}

#[cfg(test)]
mod tests;
