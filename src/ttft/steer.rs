//! Routing by the prediction when a request has no TTFT objective: the
//! members predicted much slower than the fastest are left out, so that
//! the router chooses among those that would answer about as soon.
//!
//! A member is left out only when its prediction and the fastest one's
//! are both of [`Confidence::High`], and it is predicted over
//! `percent`% of the fastest and at least [`MARGIN_MS`] slower: a guess
//! never moves a request, and neither does a difference within the
//! scheduling jitter of a short prompt. A member with no data or a low
//! confidence is never left out, so it goes on learning.
//!
//! Pure: no clock, no I/O. Deliberately not here: the objective's verdict
//! ([`super::slo`]), and falling back to the members left out when every
//! other fails (the proxy's routing).

use llamatap_policy::ttft::{Confidence, Prediction};

/// Least difference to the fastest member's prediction that leaves a
/// member out, ms.
pub const MARGIN_MS: f64 = 50.0;

/// The members predicted over `percent`% of the fastest one's TTFT (and
/// [`MARGIN_MS`] slower), among `members`; empty when fewer than two
/// members have a prediction of high confidence.
pub fn slower(percent: u32, members: &[(usize, Prediction)]) -> Vec<usize> {
    let sure = |p: &Prediction| match p {
        Prediction::Estimate(e) if e.confidence == Confidence::High && e.ttft_ms.is_finite() => {
            Some(e.ttft_ms)
        }
        _ => None,
    };
    let Some(best) = members
        .iter()
        .filter_map(|(_, p)| sure(p))
        .min_by(f64::total_cmp)
    else {
        return Vec::new();
    };
    let bound = (best * f64::from(percent) / 100.0).max(best + MARGIN_MS);
    members
        .iter()
        .filter(|(_, p)| sure(p).is_some_and(|ms| ms > bound))
        .map(|&(m, _)| m)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use llamatap_policy::ttft::Estimate;

    fn est(ms: f64, confidence: Confidence) -> Prediction {
        Prediction::Estimate(Estimate {
            ttft_ms: ms,
            wait_ms: 0.0,
            prefill_ms: ms,
            overhead_ms: 0.0,
            prompt_tokens: 100,
            ahead_tokens: 0,
            confidence,
        })
    }

    #[test]
    fn a_member_far_slower_than_the_fastest_is_left_out() {
        let m = [
            (0, est(200.0, Confidence::High)),
            (1, est(900.0, Confidence::High)),
            (2, est(250.0, Confidence::High)),
        ];
        assert_eq!(slower(150, &m), vec![1]);
    }

    #[test]
    fn the_margin_keeps_short_prompts_together() {
        // 3x slower, but only 40 ms: within a short prompt's jitter.
        let m = [
            (0, est(20.0, Confidence::High)),
            (1, est(60.0, Confidence::High)),
        ];
        assert!(slower(150, &m).is_empty());
        let m = [
            (0, est(20.0, Confidence::High)),
            (1, est(71.0, Confidence::High)),
        ];
        assert_eq!(slower(150, &m), vec![1]);
    }

    #[test]
    fn guesses_neither_leave_out_nor_set_the_pace() {
        let m = [
            (0, est(10.0, Confidence::Low)),
            (1, est(900.0, Confidence::High)),
            (2, Prediction::NoData),
            (3, est(5000.0, Confidence::Low)),
        ];
        // Only one sure member: it is the fastest sure one, nothing is left out.
        assert!(slower(150, &m).is_empty());
    }

    #[test]
    fn the_bound_is_inclusive_of_the_percentage() {
        let m = [
            (0, est(1000.0, Confidence::High)),
            (1, est(1500.0, Confidence::High)),
            (2, est(1500.1, Confidence::High)),
        ];
        assert_eq!(slower(150, &m), vec![2]);
    }

    #[test]
    fn the_fastest_is_never_left_out() {
        for percent in [110, 150, 10_000] {
            for a in [0.0, 1.0, 50.0, 1e6] {
                for b in [0.0, 1.0, 50.0, 1e6, f64::INFINITY] {
                    let m = [(0, est(a, Confidence::High)), (1, est(b, Confidence::High))];
                    let out = slower(percent, &m);
                    assert!(out.len() < 2, "{percent} {a} {b}: {out:?}");
                    assert!(!out.contains(&if a <= b { 0 } else { 1 }));
                }
            }
        }
    }
}
