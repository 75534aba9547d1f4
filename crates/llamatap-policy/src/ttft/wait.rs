//! When a slot frees for a request: the wait before its prefill can start.
//!
//! With a free slot and nothing queued ahead the wait is 0. Otherwise each
//! busy slot frees when its prompt's remaining tokens are prefilled and its
//! answer's remaining tokens decoded (at the member's rates with every slot
//! busy); the requests queued ahead take
//! the slots in the order they free, each holding its slot for a typical
//! service (a typical prefill plus a typical answer), so the request waits for
//! the `(q mod S)`-th slot to free plus `⌊q / S⌋` services, `q` being the
//! requests that must take a slot before it and `S` the slots. That is exact
//! when services are equal, and O(S) (at most [`MAX_SLOTS`] slots are
//! considered).
//!
//! A busy slot's prompt still prefilling counts for the part of it its time
//! so far has not gone through ([`prefill_undone`]).
//!
//! Deliberately not here: learning the rates (`member.rs`).

use super::input::{InFlight, Load};

/// The most slots whose free times are computed; a member with more is
/// treated as having this many, each freeing as its own answers say.
pub const MAX_SLOTS: usize = 64;

/// The rates the wait is computed with.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pace {
    /// Decode milliseconds per token with every slot busy.
    pub decode_ms: f64,
    /// Tokens of a typical answer.
    pub answer_tokens: f64,
    /// The share of its `max_tokens` an answer typically uses, once known.
    pub used: Option<f64>,
    /// A typical service: prefill plus answer, ms.
    pub service_ms: f64,
    /// Prefill milliseconds per token with every slot busy.
    pub prefill_ms: f64,
}

/// The wait before the prefill starts (ms), and how many other slots are
/// busy when it does. `None` when a wait is needed but no decode rate is
/// known (`pace` is `None`).
pub(super) fn slot_wait(load: &Load<'_>, pace: Option<Pace>) -> Option<(f64, u32)> {
    if load.slots == 0 {
        // Unknown slots: assume one is free.
        return Some((0.0, load.busy));
    }
    let slots = load.slots.min(MAX_SLOTS as u32);
    let busy = load.busy.min(slots);
    let free = slots - busy;
    if load.queue_ahead < free {
        return Some((0.0, busy));
    }
    let pace = pace?;
    // Free times of the slots: 0 for the free ones, the remaining decode for
    // the busy ones.
    let mut at = [0.0f64; MAX_SLOTS];
    for (i, t) in at.iter_mut().enumerate().take(busy as usize) {
        *t = match load.in_flight.get(i) {
            Some(a) => {
                let left = remaining(generated(a, &pace), a.max_tokens, &pace);
                let prefill = prefill_undone(a, |n, _| n * pace.prefill_ms);
                left * pace.decode_ms + prefill * pace.prefill_ms
            }
            None => pace.answer_tokens / 2.0 * pace.decode_ms,
        };
    }
    let at = &mut at[..slots as usize];
    let q = load.queue_ahead as usize;
    let k = q % slots as usize;
    let rounds = (q / slots as usize) as f64;
    let (_, kth, _) = at.select_nth_unstable_by(k, f64::total_cmp);
    let wait = *kth + rounds * pace.service_ms;
    if wait.is_finite() {
        Some((wait.max(0.0), slots - 1))
    } else {
        None
    }
}

/// The prompt tokens `a` still has to prefill, less those its slot's time
/// on them so far ([`InFlight::prefilling_ms`]) went through, `ms(n, c)`
/// being what the member takes to prefill `n` of them after `c` in the slot
/// ([`InFlight::prefill_context`]): llama-server reports a batch's progress
/// only when it is done, so a prompt of one batch reads as whole until its
/// first token. Time beyond the expected drains it to 0.
pub(super) fn prefill_undone(a: &InFlight, ms: impl Fn(f64, f64) -> f64) -> f64 {
    let left = f64::from(a.prefill_left);
    if a.prefilling_ms == 0 || a.prefill_left == 0 {
        return left;
    }
    let whole = ms(left, f64::from(a.prefill_context));
    if whole.is_nan() || whole <= 0.0 {
        return left;
    }
    left * (1.0 - f64::from(a.prefilling_ms) / whole).max(0.0)
}

/// Tokens an answer has generated: counted, else its time since its
/// first token at the decode rate with every slot busy. The count wins:
/// the time overstates the tokens whenever prompts prefilling beside slow
/// the decode, and an answer thought nearly done holds its slot on.
fn generated(a: &InFlight, pace: &Pace) -> u32 {
    if a.generated > 0 {
        return a.generated;
    }
    if pace.decode_ms > 0.0 {
        (f64::from(a.decoding_ms) / pace.decode_ms).min(f64::from(u32::MAX)) as u32
    } else {
        0
    }
}

/// Tokens an answer still has to decode: what is left of a typical answer
/// (with a `max_tokens`, the share of it answers typically use), at least a
/// quarter of one since it has not stopped yet, never more than its
/// `max_tokens` allow.
fn remaining(generated: u32, max_tokens: Option<u32>, pace: &Pace) -> f64 {
    let g = f64::from(generated);
    let typical = match (max_tokens, pace.used) {
        (Some(m), Some(used)) => f64::from(m) * used,
        _ => pace.answer_tokens,
    };
    let expected = (typical - g).max(typical / 4.0).max(1.0);
    match max_tokens {
        Some(m) => expected.min(f64::from(m.saturating_sub(generated)).max(1.0)),
        None => expected,
    }
}
