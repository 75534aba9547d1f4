//! A promise: the TTFT objective an answer in flight was admitted with,
//! kept on the board of answers in flight ([`super::Flights`]) while its
//! prompt prefills, so that a prompt sent to the same member later does not
//! push its first token past the objective.
//!
//! llama-server fills each batch with every pending prompt, so a prompt
//! sent beside one still prefilling delays that one's first token by about
//! its own prefill. A later request whose prompt would make a promise miss
//! waits for that prefill's end before it is sent (the proxy's `predict`);
//! since the prompts ahead of it are part of its own prediction, its wait
//! was already predicted.
//!
//! Pure arithmetic on instants given by the caller. Deliberately not here:
//! the board ([`super::Flights`]) and the wait itself.

use std::time::Instant;

/// The objective of an answer still prefilling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Promise {
    /// When its request was sent to the member.
    pub sent: Instant,
    /// When its first token is due by the objective (arrival + objective).
    pub deadline: Instant,
    /// Its predicted TTFT from `sent`, ms (corrected by its progress).
    pub expected_ms: f64,
    /// Its member's calibration factor: the high quantile of recent
    /// measured over predicted TTFTs (1 when none is known).
    pub factor: f64,
}

impl Promise {
    /// Whether a prompt whose prefill adds `delay_ms` to this one's would
    /// make it miss its deadline, by its calibrated expectation, while the
    /// deadline is still ahead at `now` (a deadline passed is kept by no
    /// wait).
    pub fn broken_by(&self, delay_ms: f64, now: Instant) -> bool {
        if self.deadline <= now || delay_ms.is_nan() || delay_ms <= 0.0 {
            return false;
        }
        let allowed = self.deadline.saturating_duration_since(self.sent);
        let factor = if self.factor.is_finite() && self.factor > 0.0 {
            self.factor
        } else {
            1.0
        };
        (self.expected_ms.max(0.0) + delay_ms) * factor > allowed.as_secs_f64() * 1000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn promise(expected_ms: f64, factor: f64, slo_ms: u64) -> (Promise, Instant) {
        let sent = Instant::now();
        let p = Promise {
            sent,
            deadline: sent + Duration::from_millis(slo_ms),
            expected_ms,
            factor,
        };
        (p, sent)
    }

    #[test]
    fn a_delay_breaks_a_promise_only_past_its_slack() {
        let (p, sent) = promise(600.0, 1.0, 1000);
        assert!(!p.broken_by(399.0, sent));
        assert!(p.broken_by(401.0, sent));
        assert!(!p.broken_by(0.0, sent));
        assert!(!p.broken_by(f64::NAN, sent));
        assert!(!p.broken_by(-5.0, sent));
    }

    #[test]
    fn the_calibration_factor_narrows_the_slack() {
        let (p, sent) = promise(600.0, 1.5, 1000);
        // 600 × 1.5 = 900: 100 ms of slack left at most.
        assert!(!p.broken_by(60.0, sent));
        assert!(p.broken_by(80.0, sent));
        // A factor that is no number counts as 1.
        let (q, sent) = promise(600.0, f64::NAN, 1000);
        assert!(!q.broken_by(399.0, sent));
    }

    #[test]
    fn a_passed_deadline_is_kept_by_no_wait() {
        let (p, sent) = promise(600.0, 1.0, 1000);
        assert!(!p.broken_by(5000.0, sent + Duration::from_millis(1000)));
        assert!(p.broken_by(5000.0, sent + Duration::from_millis(999)));
    }
}
