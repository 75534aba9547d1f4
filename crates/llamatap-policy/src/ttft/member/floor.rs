//! The least time a member could take to its first token, from the fastest
//! it was ever seen to work: what an objective below it can be refused by
//! before any prediction is sure.
//!
//! A first token needs at least one forward pass of the model (the prompt's
//! last uncached token, even when all the rest is cached) and the
//! per-request work outside `prompt_ms` (parsing, templating, tokenizing,
//! the first event's way back). So the floor is [`SHARE`] of the sum of:
//! - the fastest decode step seen (`predicted_ms / predicted_n` of an
//!   answer of two tokens or more): one forward pass of one token, no
//!   slower than the prefill of one (speculative decoding only makes it
//!   smaller);
//! - the least overhead seen (`ttft − prompt_ms` of a streamed answer that
//!   started at once).
//!
//! Either counts 0 while unseen; with neither seen there is no floor.
//!
//! Both are minima and never rise, but for a new process: the floor is of
//! the member's process it was seen from (its epoch, the caller's count of
//! the member's restarts, [`Observation::process`]), and a floor of another
//! epoch is emptied ([`Floor::renew`], at an answer or at the caller's
//! word): a process restarted on faster hardware could meet
//! objectives its old floor refuses, and refused requests teach nothing.
//! The margin of [`SHARE`] covers a step faster than the answers' mean.
//! Fixed size, O(1).
//!
//! The prediction's prefill is never less than the fastest step
//! (`member.rs`): a curve fitted on a few answers can put a prompt cached
//! to its last token below one forward pass.
//!
//! Deliberately not here: the prediction (`member.rs`) and the refusal by
//! the floor (the caller's).

use super::super::input::Observation;

/// The share of the fastest step and overhead seen that the floor is.
pub const SHARE: f64 = 0.5;

/// The fastest decode step and least overhead a member was seen to take.
#[derive(Debug, Clone, Copy, Default)]
pub(in super::super) struct Floor {
    /// The fastest decode step, ms (`None` before an answer of 2 tokens).
    step_ms: Option<f32>,
    /// The least `ttft − prompt_ms`, ms (`None` before a streamed answer
    /// that started at once).
    overhead_ms: Option<f32>,
    /// The process both were seen from.
    epoch: u32,
}

impl Floor {
    /// Empties the floor when `epoch` is not the one it was seen from.
    pub(in super::super) fn renew(&mut self, epoch: u32) {
        if self.epoch != epoch {
            *self = Floor {
                epoch,
                ..Floor::default()
            };
        }
    }

    /// Takes the answer's decode step and overhead in, where each is lower
    /// (after emptying a floor of another process).
    pub(in super::super) fn observe(&mut self, obs: &Observation) {
        self.renew(obs.process);
        let t = &obs.timings;
        if t.predicted_n >= 2 && t.predicted_ms.is_finite() && t.predicted_ms > 0.0 {
            lower(&mut self.step_ms, t.predicted_ms / f64::from(t.predicted_n));
        }
        let timed = t.prompt_ms.is_finite() && t.prompt_ms >= 0.0;
        if let Some(ttft) = obs.ttft_ms.filter(|v| v.is_finite() && timed) {
            lower(&mut self.overhead_ms, (ttft - t.prompt_ms).max(0.0));
        }
    }

    /// The fastest decode step seen, ms (0 before one): the least a
    /// prefill of one token or more takes.
    pub(in super::super) fn step_ms(&self) -> f64 {
        self.step_ms.map_or(0.0, f64::from)
    }

    /// The floor, ms: [`SHARE`] of the fastest step plus the least
    /// overhead (either 0 while unseen); `None` before either was seen.
    pub(in super::super) fn ms(&self) -> Option<f64> {
        if self.step_ms.is_none() && self.overhead_ms.is_none() {
            return None;
        }
        let ms = |v: Option<f32>| v.map_or(0.0, f64::from);
        Some(SHARE * (ms(self.step_ms) + ms(self.overhead_ms)))
    }
}

/// `held` lowered to `x` (kept when `x` is not lower, or too large for
/// an `f32`: no time is).
fn lower(held: &mut Option<f32>, x: f64) {
    #[allow(clippy::cast_possible_truncation)]
    let x = x as f32;
    if x.is_finite() && held.is_none_or(|h| x < h) {
        *held = Some(x);
    }
}
