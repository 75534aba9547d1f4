//! One prompt's prefill on a member as an interval, from its first
//! `prompt_progress` event (its slot started) to its first token, with the
//! prompt tokens it had to process; and how many of them went through the
//! batches of another prefill, pro rata of the two intervals' overlap.
//!
//! llama-server fills each batch with every prompt still prefilling, so a
//! prefill's `prompt_ms` covers the tokens of the prompts beside it too:
//! the book learns its curve from the whole ([`super::Finished`]'s
//! `prefill_others`). Pro rata is an estimate: a prefill is taken as
//! processing its tokens evenly over its interval.
//!
//! Deliberately not here: where the windows are kept ([`super::Flights`]),
//! and prefills without progress events (non-streamed answers), whose
//! interval nothing reports.

use std::time::Instant;

/// A prefill's interval and its new tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    start: Option<Instant>,
    end: Option<Instant>,
    tokens: u32,
}

impl Window {
    /// The prefill started `at` (its first progress event), with `tokens`
    /// to process (its prompt less the cached part); later calls do
    /// nothing.
    pub fn start(&mut self, at: Instant, tokens: u32) {
        if self.start.is_none() {
            self.start = Some(at);
            self.tokens = tokens;
        }
    }

    /// The prefill ended `at` (its first token); nothing when it never
    /// started, or already ended.
    pub fn end(&mut self, at: Instant) {
        if let (Some(s), None) = (self.start, self.end) {
            self.end = Some(at.max(s));
        }
    }

    /// Whether its start was seen.
    pub fn started(&self) -> bool {
        self.start.is_some()
    }

    /// Its interval, once ended.
    pub fn span(&self) -> Option<(Instant, Instant)> {
        self.start.zip(self.end)
    }

    /// Its tokens processed during `[from, to]`, pro rata (a prefill not
    /// yet ended runs until `now`).
    pub fn tokens_during(&self, (from, to): (Instant, Instant), now: Instant) -> f64 {
        let Some(start) = self.start else {
            return 0.0;
        };
        let end = self.end.unwrap_or(now).max(start);
        let shared = to.min(end).saturating_duration_since(from.max(start));
        let whole = end.duration_since(start);
        let share = if whole.is_zero() {
            // An instant: inside the interval or not.
            f64::from(u8::from(start >= from && start <= to))
        } else {
            (shared.as_secs_f64() / whole.as_secs_f64()).min(1.0)
        };
        f64::from(self.tokens) * share
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    fn close(got: f64, want: f64) {
        assert!((got - want).abs() < 1e-6, "{got} against {want}");
    }

    fn window(base: Instant, from: u64, to: Option<u64>, tokens: u32) -> Window {
        let mut w = Window::default();
        w.start(at(base, from), tokens);
        if let Some(t) = to {
            w.end(at(base, t));
        }
        w
    }

    #[test]
    fn overlap_is_pro_rata_of_the_other_prefills_interval() {
        let b = Instant::now();
        let other = window(b, 100, Some(300), 400);
        let now = at(b, 1000);
        // Half of its interval falls in [200, 500]: half its tokens.
        close(other.tokens_during((at(b, 200), at(b, 500)), now), 200.0);
        // All of it inside.
        close(other.tokens_during((at(b, 0), at(b, 500)), now), 400.0);
        // None of it.
        close(other.tokens_during((at(b, 300), at(b, 500)), now), 0.0);
        close(other.tokens_during((at(b, 0), at(b, 100)), now), 0.0);
    }

    #[test]
    fn a_prefill_still_going_runs_until_now_and_one_never_started_counts_nothing() {
        let b = Instant::now();
        let going = window(b, 100, None, 300);
        close(
            going.tokens_during((at(b, 0), at(b, 200)), at(b, 400)),
            100.0,
        );
        assert!(going.span().is_none());
        let mut never = Window::default();
        never.end(at(b, 50));
        assert!(!never.started() && never.span().is_none());
        close(never.tokens_during((b, at(b, 1000)), at(b, 1000)), 0.0);
    }

    #[test]
    fn start_and_end_are_set_once_and_an_instant_counts_whole_or_not_at_all() {
        let b = Instant::now();
        let mut w = window(b, 100, Some(100), 50);
        w.start(at(b, 0), 9);
        w.end(at(b, 900));
        assert_eq!(w.span(), Some((at(b, 100), at(b, 100))));
        close(w.tokens_during((at(b, 50), at(b, 150)), b), 50.0);
        close(w.tokens_during((at(b, 150), at(b, 250)), b), 0.0);
        // An end before the start (clock order across threads) is the start.
        let mut back = window(b, 100, None, 10);
        back.end(at(b, 40));
        assert_eq!(back.span(), Some((at(b, 100), at(b, 100))));
    }
}
