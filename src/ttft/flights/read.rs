//! Reading the board: a member's answers copied for a prediction (each
//! with its tokens counted, its time since its first token, and its time on
//! the prompt tokens it still has to prefill), and the prompt tokens of
//! other answers that went through an answer's batches, once its prefill
//! ended.
//!
//! Deliberately not here: the board's updates (`flights.rs`).

use std::time::Instant;

use llamatap_policy::ttft::InFlight;

use super::{Boarded, Flights};

/// The prompt tokens of other answers that went through the member's
/// batches while an answer waited for its slot and while it prefilled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Overlap {
    /// During its prefill (its first progress event to its first token).
    pub during: u32,
    /// From its dispatch to its prefill's start: the batches it waited for.
    pub before: u32,
}

impl Flights {
    /// Copies `member`'s answers, in boarding order (the first ones hold
    /// its slots), into `out`, each with the tokens its stream counted, its
    /// time since its first token, and its time on the prompt tokens it
    /// still has to prefill (since the progress event that reported them);
    /// how many.
    pub fn of(&self, member: usize, out: &mut [InFlight]) -> usize {
        let now = Instant::now();
        let Ok(by) = self.by_member.lock() else {
            return 0;
        };
        let Some(m) = by.get(&member) else {
            return 0;
        };
        let n = m.list.len().min(out.len());
        for (o, e) in out.iter_mut().zip(&m.list) {
            *o = e.flight;
            o.generated = e.tally.get();
            let since = e
                .first_token
                .map_or(0, |t| now.saturating_duration_since(t).as_millis());
            o.decoding_ms = u32::try_from(since).unwrap_or(u32::MAX);
            let on = e
                .left_since
                .filter(|_| o.prefill_left > 0)
                .map_or(0, |t| now.saturating_duration_since(t).as_millis());
            o.prefilling_ms = u32::try_from(on).unwrap_or(u32::MAX);
        }
        n
    }

    /// The prompt tokens of other answers on `b`'s member processed during
    /// `b`'s prefill, and before it, from its dispatch to its slot's start
    /// (pro rata, `Window::tokens_during`), once its prefill ended; `None`
    /// before, or without its start.
    pub fn overlap(&self, b: Boarded, now: Instant) -> Option<Overlap> {
        let by = self.by_member.lock().ok()?;
        let m = by.get(&b.member)?;
        let own = m.list.iter().find(|e| e.id == b.id)?;
        let span = own.window.span()?;
        let before = (own.boarded.min(span.0), span.0);
        let others = || {
            let listed = m.list.iter().filter(|e| e.id != b.id).map(|e| &e.window);
            listed.chain(&m.landed)
        };
        let tokens = |(from, to)| {
            let t: f64 = others().map(|w| w.tokens_during((from, to), now)).sum();
            t.round().min(f64::from(u32::MAX)) as u32
        };
        Some(Overlap {
            during: tokens(span),
            before: tokens(before),
        })
    }
}
