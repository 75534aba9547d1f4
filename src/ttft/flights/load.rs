//! The board as the predictor reads it ([`Flights::of`]): each answer on
//! a member, in boarding order, with the tokens its stream counted, its
//! time since its first token, and the prompt tokens it still has to
//! prefill *now*.
//!
//! llama-server reports a prompt's tokens left when its slot starts it and
//! after each batch (`prompt_progress`); a prompt that fits one batch
//! (2048 tokens by default) says nothing more until its first token. Read
//! as reported, a prompt half done counts whole for a request dispatched
//! beside it, which then waits for only the rest of that batch. So the
//! prompts started are drained as the member prefills them: one after
//! another in the order they were reported (a batch holding several takes
//! about as long as their prefills one after the other), each at its own
//! predicted pace (its prediction's prefill milliseconds per token), from
//! its report. One running past its prediction counts 0 until its first
//! token.
//!
//! Deliberately not here: the pace (the predictor's, set at dispatch), and
//! any prompt not started (it has all its tokens left).

use std::time::{Duration, Instant};

use llamatap_policy::ttft::{InFlight, MAX_SLOTS};

use super::Flights;

/// A started prefill as last reported: when, its tokens left, its pace in
/// milliseconds per token.
type Reported = (Instant, u32, f64);

impl Flights {
    /// Copies `member`'s answers, in boarding order (the first ones hold
    /// its slots), into `out`, each with the tokens its stream counted, its
    /// time since its first token, and its prompt tokens left now (the
    /// started prefills drained: see the module); how many.
    pub fn of(&self, member: usize, out: &mut [InFlight]) -> usize {
        let now = Instant::now();
        let Ok(by) = self.by_member.lock() else {
            return 0;
        };
        let Some(m) = by.get(&member) else {
            return 0;
        };
        let n = m.list.len().min(out.len()).min(MAX_SLOTS);
        // The started prefills still to finish, by their report.
        let mut started = [(0usize, (now, 0u32, 0.0f64)); MAX_SLOTS];
        let mut k = 0;
        for (i, (o, e)) in out.iter_mut().zip(&m.list).take(n).enumerate() {
            *o = e.flight;
            o.generated = e.tally.get();
            let since = e
                .first_token
                .map_or(0, |t| now.saturating_duration_since(t).as_millis());
            o.decoding_ms = u32::try_from(since).unwrap_or(u32::MAX);
            if let Some(at) = e.reported.filter(|_| e.first_token.is_none()) {
                if e.flight.prefill_left > 0 && e.pace_ms > 0.0 {
                    started[k] = (i, (at, e.flight.prefill_left, e.pace_ms));
                    k += 1;
                }
            }
        }
        let started = &mut started[..k];
        started.sort_by_key(|&(_, (at, _, _))| at);
        let mut done: Option<Instant> = None;
        for &(i, reported) in started.iter() {
            let (left, finish) = left_now(reported, done, now);
            done = Some(finish);
            if let Some(o) = out.get_mut(i) {
                o.prefill_left = left;
            }
        }
        n
    }
}

/// A prefill reported as `(at, tokens, pace_ms)`, started once the member
/// is `free` of the prefills before it: its tokens left at `now`, and when
/// it finishes.
fn left_now(
    (at, tokens, pace_ms): Reported,
    free: Option<Instant>,
    now: Instant,
) -> (u32, Instant) {
    let start = free.map_or(at, |f| f.max(at));
    let ms = f64::from(tokens) * pace_ms;
    let finish = Duration::try_from_secs_f64(ms / 1000.0)
        .ok()
        .and_then(|d| start.checked_add(d))
        .unwrap_or(start);
    let left = if now <= start {
        tokens
    } else if now >= finish {
        0
    } else {
        let rest_ms = finish.duration_since(now).as_secs_f64() * 1000.0;
        (rest_ms / pace_ms).ceil().clamp(0.0, f64::from(tokens)) as u32
    };
    (left, finish)
}

#[cfg(test)]
mod tests;
