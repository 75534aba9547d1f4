//! One member and model's learned rates, and the prediction from them.
//!
//! Learned from each finished request ([`Observation`]):
//! - the prefill curve on an idle member (`fit.rs`), from `prompt_n` (plus
//!   the tokens of other prompts prefilled during it: they shared its
//!   batches), `cache_n` and `prompt_ms` divided by the bend at the busy
//!   slots then;
//! - the prefill bend and the decode bend with other busy slots (`bend.rs`);
//! - the share of the prompts prefilling beside at dispatch that the
//!   request's first token waited for: those that went through its
//!   batches, and those prefilled between its dispatch and its slot's
//!   start (its prompt missed their batch);
//! - the decode time per token on an idle member, the typical answer length,
//!   the share of `max_tokens` answers use and a typical prefill (for when a
//!   busy slot frees, `wait.rs`);
//! - the per-request overhead outside `prompt_ms` (`ttft − prompt_ms`, from
//!   requests that started at once), and the part of it before the slot
//!   starts (from the first progress event);
//! - prompt tokens per prompt byte (`bytes.rs`);
//! - the tokens a prompt predicted with nothing cached still finds cached
//!   (the chat template's head, shared with whatever the slot held; up to
//!   64, more being a cache the caller did not know of).
//!
//! Every mean is exponentially decayed with a bounded weight, so old
//! hardware is forgotten. The curve is fitted by relative least squares and
//! moves slowly (about twenty prefills weigh); a level, the decayed mean of
//! the last prefills' offsets from the curve (each taken in up to a factor
//! of 1.5, the newest weighing 0.3), scales it to the member's speed now:
//! other work on its machine, or a restart on other hardware, shows within a
//! few requests. A prefill off the expectation is clipped, for the curve, to
//! three times the usual scatter (at least ±25%, at most a factor of 3).
//! A new member may start from a peer's rates, faded (`member/prior.rs`).
//! Fixed size (no allocation), O(1) per update and per prediction.
//! Deliberately not here: the bounded table of members (`ttft.rs`), and
//! the correction during the prefill (`member/correct.rs`).

use super::bend::Bend;
use super::bytes::BytesToTokens;
use super::fit::{PrefillFit, HEAD};
use super::input::{Observation, PromptSize, Query};
use super::wait::{prefill_undone, slot_wait, Pace};
use super::{Confidence, Estimate, Prediction};
use mean::Mean;

mod correct;
mod floor;
mod mean;
mod prior;
use floor::Floor;
pub use floor::SHARE as FLOOR_SHARE;
pub use prior::PEER_ANSWERS;

/// Decay of the prefill fit per observation (about twenty observations weigh).
const DECAY: f64 = 0.95;
/// Decay of the other means per observation.
const MEAN_DECAY: f64 = 0.85;
/// Outliers are clipped to this factor of the current estimate.
const CLIP: f64 = 3.0;
/// The weight of the newest prefill in the level (a decayed mean).
const LEVEL_RATE: f64 = 0.3;
/// The largest offset (ln) from the curve one prefill brings to the level:
/// a factor of 1.5.
const LEVEL_STEP: f64 = 0.4;
/// The narrowest clipping band (ln): ±25% around the curve.
const MIN_BAND: f64 = 0.223;
/// The fit's weight (prefills seen, decayed) before a prefill off the
/// curve is clipped.
const CLIP_AFTER: f64 = 6.0;
/// Observations before an estimate is of high confidence.
const CONFIDENT_AFTER: u32 = 4;
/// The share of the prompts other slots are prefilling that is expected to
/// go through this one's batches, before one was learned: llama-server fills
/// each batch in slot order, and the slot a request gets is not known.
const BESIDE_SHARE: f64 = 0.5;
/// Prefill tokens below which a ratio says little about the per-token rate.
const MIN_RATIO_TOKENS: u32 = 32;

/// The learned rates of one member and model.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Rates {
    prefill: PrefillFit,
    prefill_bend: Bend,
    /// Idle decode ms per token.
    decode: Mean,
    decode_bend: Bend,
    answer_tokens: Mean,
    /// The share of `max_tokens` answers used.
    used: Mean,
    /// Prefill ms as measured (for the typical service).
    prefill_typical: Mean,
    /// `ttft − prompt_ms` of a request that started at once, less half a
    /// decode step when other slots were busy: its typical value
    /// ([`Mean::add_log_cost`]).
    overhead: Mean,
    /// The time to a request's first progress event, when it started at
    /// once.
    lead: Mean,
    bytes: BytesToTokens,
    /// Tokens llama-server reused for prompts predicted with nothing
    /// cached (the chat template's head).
    head: Mean,
    /// The share of the prompts prefilling beside at dispatch that this
    /// one's first token waited for: went through its batches, or ran
    /// before its slot started.
    share: Mean,
    /// Decayed mean of |ln(measured / predicted)|: the usual scatter.
    noise: Mean,
    /// The fastest step and least overhead seen (`member/floor.rs`).
    pub(super) floor: Floor,
    /// ln of the member's speed now against the curve's: the decayed mean
    /// of the last prefills' offsets from it (0: as fitted).
    level: f64,
    observations: u32,
    /// The curve is a peer's, not yet scaled to this member's first
    /// prefill (`member/prior.rs`).
    borrowed: bool,
}

impl Rates {
    /// Learns from one finished request.
    pub(super) fn observe(&mut self, obs: &Observation) {
        let t = &obs.timings;
        let busy = obs.busy_others;
        let total = u64::from(t.prompt_n) + u64::from(t.cache_n);
        if let Some(bytes) = obs.prompt_bytes.filter(|_| total > 0) {
            self.bytes.add(bytes as f64, total as f64);
        }
        // More than a head's worth is a cache the caller did not know of
        // (a repeated prompt), not the head.
        if obs.predicted_uncached && total > 0 && f64::from(t.cache_n) <= HEAD {
            self.head.add(f64::from(t.cache_n));
        }
        if obs.beside_at_dispatch >= MIN_RATIO_TOKENS {
            let waited = obs.prefill_others.saturating_add(obs.prefill_before);
            let seen = f64::from(waited) / f64::from(obs.beside_at_dispatch);
            self.share.add(seen.min(1.0));
        }
        if t.prompt_n > 0 && t.prompt_ms.is_finite() && t.prompt_ms >= 0.0 {
            let new = t.prompt_n.saturating_add(obs.prefill_others);
            self.observe_prefill(new, t.cache_n, t.prompt_ms, busy);
            self.prefill_typical.add(t.prompt_ms);
        }
        if t.predicted_n >= 2 && t.predicted_ms.is_finite() && t.predicted_ms > 0.0 {
            let per = t.predicted_ms / f64::from(t.predicted_n);
            if let Some(idle) = self.decode.get().filter(|_| busy > 0) {
                self.decode_bend.add(busy, per / idle, MEAN_DECAY);
            }
            let idle = self.decode.clip(per / self.decode_bend.at(busy), 0.0);
            self.decode.add(idle);
        }
        if t.predicted_n > 0 {
            self.answer_tokens.add(f64::from(t.predicted_n));
            if let Some(max) = obs.max_tokens.filter(|m| *m > 0) {
                self.used
                    .add((f64::from(t.predicted_n) / f64::from(max)).min(1.0));
            }
        }
        // The fixed costs are learned from neither the first request a
        // member answers (its cold start: weights paged in, buffers
        // allocated) nor one that other prompts went ahead of after it was
        // sent (their prefill is in its TTFT: at a fleet's start, a request
        // sent to an idle member, with two more a millisecond later, waited
        // 1,050 ms for theirs and taught that as the member's overhead).
        let fixed = self.observations > 0 && obs.prefill_before == 0;
        let timed = t.prompt_ms.is_finite() && t.prompt_ms >= 0.0;
        if let Some(ttft) = obs
            .ttft_ms
            .filter(|v| fixed && v.is_finite() && *v >= 0.0 && timed)
        {
            let step = self.step_ms(busy);
            let over = (ttft - t.prompt_ms - step).max(0.0);
            self.overhead.add_log_cost(over, 20.0);
        }
        if let Some(lead) = obs
            .started_ms
            .filter(|v| fixed && v.is_finite() && *v >= 0.0)
        {
            self.lead.add_cost(lead, 20.0);
        }
        self.floor.observe(obs);
        self.observations = self.observations.saturating_add(1);
    }

    fn observe_prefill(&mut self, new: u32, cached: u32, ms: f64, busy: u32) {
        let (n, c) = (f64::from(new), f64::from(cached));
        let mut y = ms / self.prefill_bend.at(busy);
        if std::mem::take(&mut self.borrowed) {
            self.scale_to(n, c, y);
        }
        let known = self.prefill.weight() >= 1.0;
        let curve = self.prefill.at(n, c);
        let expected = curve * self.level.exp();
        if known && curve > 0.0 {
            if busy > 0 && new >= MIN_RATIO_TOKENS {
                self.prefill_bend.add(busy, ms / expected, MEAN_DECAY);
                y = ms / self.prefill_bend.at(busy);
            }
            // The level is the recent mean of where prefills fall against
            // the (slower) curve: the member's speed now, with other work on
            // its machine or after a restart on other hardware.
            let off = (y / curve).ln().clamp(-LEVEL_STEP, LEVEL_STEP);
            self.level += LEVEL_RATE * (off - self.level);
            let surprise = (y / expected).clamp(1.0 / CLIP, CLIP).ln();
            if self.prefill.weight() >= CLIP_AFTER {
                // Clipped to a band of three times the usual scatter (once
                // the curve rests on enough prefills: the expectation of a
                // curve of four terms from fewer is a guess, and a prefill
                // clipped to a guess stays in the fit).
                let band = self
                    .noise
                    .get()
                    .map_or(CLIP.ln(), |s| (3.0 * s).clamp(MIN_BAND, CLIP.ln()))
                    .exp();
                y = y.clamp(expected / band, expected * band);
            }
            self.noise.add(surprise.abs());
        }
        self.prefill.add(n, c, y, DECAY);
    }

    /// Tokens of `size`, and whether they were counted (or converted with
    /// a learned line).
    fn tokens(&self, size: PromptSize) -> (u32, bool) {
        match size {
            PromptSize::Tokens(n) => (n, true),
            PromptSize::Bytes(b) => (self.bytes.tokens(b), self.bytes.learned()),
        }
    }

    /// The pace of the queue, once a decode rate is known.
    fn pace(&self, slots: u32) -> Option<Pace> {
        let idle = self.decode.get()?;
        let full = slots.saturating_sub(1);
        let decode_ms = idle * self.decode_bend.at(full);
        let answer_tokens = self.answer_tokens.get().unwrap_or(1.0).max(1.0);
        let prefill = self.prefill_typical.get().unwrap_or(0.0);
        Some(Pace {
            decode_ms,
            answer_tokens,
            used: self.used.get(),
            service_ms: prefill + answer_tokens * decode_ms,
            prefill_ms: self.prefill.at(1000.0, 0.0) / 1000.0
                * self.level.exp()
                * self.prefill_bend.at(full),
        })
    }

    /// Half a decode step with `busy` other slots busy (0 when none): the
    /// batch a request waits to finish before its own can start.
    fn step_ms(&self, busy: u32) -> f64 {
        if busy == 0 {
            return 0.0;
        }
        self.decode
            .get()
            .map_or(0.0, |d| 0.5 * d * self.decode_bend.at(busy))
    }

    /// The prediction for `query`.
    pub(super) fn predict(&self, query: &Query<'_>) -> Prediction {
        if self.prefill.weight() <= 0.0 {
            return Prediction::NoData;
        }
        let load = &query.load;
        let Some((slot_ms, busy_at_start)) = slot_wait(load, self.pace(load.slots)) else {
            return Prediction::NoData;
        };
        let (tokens, counted) = self.tokens(query.prompt);
        let tokens = tokens.max(1);
        // A prompt thought new still shares the template's head with
        // whatever the slot held.
        let cached = match self.tokens(query.cached).0 {
            0 => self.head.get().map_or(0, |h| h.round() as u32),
            n => n,
        }
        .min(tokens - 1);
        // The prompts other slots are still prefilling fill the batches
        // first (in slot order; assumed ahead): this prefill ends when they
        // and it are done. The curve is convex, so its part beyond theirs
        // grows with them, and the whole grows with the slots busy. Each
        // counts for what its time prefilling so far has not gone through.
        let factor = self.level.exp() * self.prefill_bend.at(busy_at_start);
        let beside: f64 = load
            .in_flight
            .iter()
            .take(load.busy as usize)
            .map(|f| prefill_undone(f, |n, c| factor * self.prefill.at(n, c)))
            .sum();
        let share = self.share.get().unwrap_or(BESIDE_SHARE);
        let (b, c) = (share * beside, f64::from(cached));
        let own = f64::from(tokens - cached);
        let fixed = self.prefill.at(0.0, c);
        let variable = |n: f64| (self.prefill.at(n, c) - fixed).max(0.0);
        let ahead_ms = factor * variable(b);
        // At least one forward pass: the fastest step seen.
        let prefill_ms = (factor * (fixed + (variable(b + own) - variable(b)).max(0.0)))
            .max(self.floor.step_ms());
        // A slot freeing and the prompts ahead overlap: the later one counts.
        let wait_ms = slot_ms.max(ahead_ms);
        let overhead_ms = self.overhead.get_cost().unwrap_or(0.0) + self.step_ms(load.busy);
        let high = self.observations >= CONFIDENT_AFTER
            && counted
            && self.overhead.get().is_some()
            && self.prefill_bend.seen(busy_at_start)
            && load.slots > 0;
        Prediction::Estimate(Estimate {
            ttft_ms: wait_ms + prefill_ms + overhead_ms,
            wait_ms,
            prefill_ms,
            overhead_ms,
            prompt_tokens: tokens,
            ahead_tokens: beside.round() as u32,
            confidence: if high {
                Confidence::High
            } else {
                Confidence::Low
            },
        })
    }

    /// Answers learned from (saturating).
    pub(super) fn observations(&self) -> u32 {
        self.observations
    }

    /// The learned figures, for tests and reports.
    pub(super) fn snapshot(&self) -> super::Learned {
        let c = self.prefill.coefficients().map(|v| v * self.level.exp());
        super::Learned {
            observations: self.observations,
            prefill_fixed_ms: c[0],
            prefill_ms_per_1k_tokens: c[1],
            prefill_context_ms: c[2],
            prefill_cached_ms: c[3],
            prefill_bend: std::array::from_fn(|b| self.prefill_bend.at(b as u32)),
            decode_ms_per_token: self.decode.get(),
            overhead_ms: self.overhead.get_cost(),
            bytes_per_token: self.bytes.bytes_per_token(),
        }
    }
}
