//! Time to first token, predicted before a request is dispatched, from what
//! each member and model taught about itself.
//!
//! A prediction is the sum of three parts:
//! - **the wait for a slot** (`ttft/wait.rs`): 0 with a free slot and nothing
//!   queued ahead; otherwise when a busy slot frees, from the answers in
//!   flight, their remaining tokens and the measured decode rate;
//! - **the prefill** (`ttft/fit.rs`, `ttft/bend.rs`): the tokens not cached
//!   (the prompt's tokens minus the caller's estimate of the cached prefix)
//!   on the member's learned prefill curve, after the share of the prompts
//!   other slots still have to prefill that goes through its batches
//!   (llama-server fills each batch with every pending prompt in slot order;
//!   the share is learned, half until then), times the learned factor for
//!   the slots busy beside it (their decode tokens share each batch) and
//!   the member's speed now;
//! - **the fixed overhead** outside `prompt_ms` (parsing, templating,
//!   tokenizing, the first event's way back).
//!
//! Learning is online, per member and model (any hardware mix), from
//! finished requests' `timings` and the busy slots at dispatch
//! ([`Observation`]), with decayed means of bounded weight, outlier
//! clipping and a change detector (`ttft/member.rs`). Keys share nothing,
//! but for a start: a key's first answer may start it from a peer's
//! rates, faded to one answer's weight and scaled through that answer
//! ([`TtftBook::observe_among`]). A prompt (or
//! cached prefix) known only by its bytes is converted with the member's
//! learned line from bytes to tokens (`ttft/bytes.rs`; 4 bytes per token
//! before any was learned).
//!
//! Before a key has seen one prefill, and when a slot wait is needed but no
//! decode rate is known, the answer is [`Prediction::NoData`]: nothing is
//! invented. An [`Estimate`] says [`Confidence::Low`] while it leans on
//! defaults or extrapolation.
//!
//! [`TtftBook::correct`] turns a `prompt_progress` event (`return_progress`)
//! into a corrected prediction: the wait is then known, the cached tokens are
//! llama-server's own count, and the prefill's measured speed so far scales
//! what is left.
//!
//! [`TtftBook::bound`] is the prediction times a high quantile of the
//! measured over predicted ratios the key showed lately, for requests
//! dispatched into the same kind of load (`ttft/calibration.rs`,
//! `ttft/strata.rs`, recorded by [`TtftBook::record_ratio`]): what a TTFT
//! objective is judged against. It carries the key's floor
//! ([`Bound::floor_ms`], `ttft/member/floor.rs`): half the fastest decode
//! step and least overhead it was seen to take, under which no objective
//! can be met whatever the confidence.
//!
//! Memory is bounded: a fixed-size record per key (at most 704 bytes of
//! rates and 1,072 of ratios) and at
//! most `capacity` keys; a new key at capacity replaces the one updated
//! longest ago (a scan of the table, once per new key). A prediction and an
//! update are O(1) (a hash lookup, fixed loops over 8 busy-slot buckets and
//! 15 feature subsets; the wait is O(slots), at most 64); a bound adds a
//! selection over at most 256 ratios.
//!
//! Deliberately not here: reading `timings` or progress events from bytes,
//! clocks, the affinity book's estimate of the cached prefix, headers,
//! metrics, and any decision to route or refuse by the prediction.

use std::collections::HashMap;
use std::hash::Hash;

mod bend;
mod bytes;
mod calibration;
mod fit;
mod input;
mod member;
mod strata;
#[cfg(test)]
mod tests;
mod wait;

pub use bend::BUCKETS;
pub use calibration::{quantile_of, Bound, Ratios, COVERAGE, MIN_RATIOS, WINDOW};
pub use input::{InFlight, Load, Observation, Progress, PromptSize, Query, Timings};
pub use strata::{Calibration, Stratum, MAX_AGE_S, PROBE_AFTER_S, PROBE_GAP_MAX_S};
pub use wait::MAX_SLOTS;

use member::Rates;
pub use member::{FLOOR_SHARE, PEER_ANSWERS};

/// How far a prediction can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confidence {
    /// Fewer than four observations, a prompt size from bytes with no
    /// learned bytes per token, no overhead learned yet, a busy-slot count
    /// never measured (extrapolated), or unknown slots.
    Low,
    /// Every part from this member's own measurements.
    High,
}

/// A predicted TTFT and its parts (milliseconds, finite, ≥ 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// The predicted time to first token: `wait_ms + prefill_ms + overhead_ms`.
    pub ttft_ms: f64,
    /// The wait before this prompt's own prefill: for a slot to free, or for
    /// the prompts other slots are prefilling (they fill the batches first),
    /// whichever is longer (after a progress event: the time before the slot
    /// started, now known).
    pub wait_ms: f64,
    /// The prefill of the tokens not cached.
    pub prefill_ms: f64,
    /// The fixed per-request overhead (after a progress event: what is left
    /// of it after the prefill).
    pub overhead_ms: f64,
    /// The prompt's tokens the prediction assumed.
    pub prompt_tokens: u32,
    /// The prompt tokens the other busy slots were taken to have left to
    /// prefill ([`InFlight::prefill_left`], less what their time prefilling
    /// so far went through), before the share of them this prompt is
    /// expected to wait for; what [`Observation::beside_at_dispatch`] is
    /// to say when this prediction was made at dispatch.
    pub ahead_tokens: u32,
    /// How far it can be trusted.
    pub confidence: Confidence,
}

#[cfg(test)]
impl Estimate {
    /// An estimate of a prefill alone (100 tokens, no wait or overhead),
    /// for the tests.
    pub(crate) fn prefill_only(ttft_ms: f64, confidence: Confidence) -> Estimate {
        Estimate {
            ttft_ms,
            wait_ms: 0.0,
            prefill_ms: ttft_ms,
            overhead_ms: 0.0,
            prompt_tokens: 100,
            ahead_tokens: 0,
            confidence,
        }
    }
}

/// A prediction, or the plain statement that there is nothing to predict by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Prediction {
    /// This member and model has not been measured yet (or a slot wait is
    /// needed and no decode rate is known).
    NoData,
    /// A prediction from its measurements.
    Estimate(Estimate),
}

impl Prediction {
    /// The predicted TTFT, if there is one.
    pub fn ttft_ms(&self) -> Option<f64> {
        match self {
            Prediction::NoData => None,
            Prediction::Estimate(e) => Some(e.ttft_ms),
        }
    }
}

/// What a key has learned, for reports and tests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Learned {
    /// Observations seen (saturating).
    pub observations: u32,
    /// The prefill curve's fixed part, ms.
    pub prefill_fixed_ms: f64,
    /// The prefill curve's cost per 1,000 new tokens, ms.
    pub prefill_ms_per_1k_tokens: f64,
    /// The context term: ms per 10⁶ of `new × (cached + new/2)`.
    pub prefill_context_ms: f64,
    /// The cost of the KV cache read once per prefill: ms per 1000 cached
    /// tokens.
    pub prefill_cached_ms: f64,
    /// The prefill factor with 0, 1, ... other busy slots.
    pub prefill_bend: [f64; BUCKETS],
    /// Decode ms per token on an idle member.
    pub decode_ms_per_token: Option<f64>,
    /// The per-request overhead outside `prompt_ms`, ms: its typical value
    /// with no other slot busy (a prediction adds half a decode step when
    /// others are).
    pub overhead_ms: Option<f64>,
    /// Bytes per prompt token (the ratio of the decayed sums).
    pub bytes_per_token: Option<f64>,
}

/// One key's rates and when it was last updated.
#[derive(Debug, Clone)]
struct Entry<K> {
    key: K,
    rates: Rates,
    ratios: Calibration,
    touched: u64,
}

/// The predictor: learned rates per key (a member and a model, as the caller
/// names them), at most `capacity` keys.
#[derive(Debug, Clone)]
pub struct TtftBook<K> {
    index: HashMap<K, usize>,
    entries: Vec<Entry<K>>,
    capacity: usize,
    clock: u64,
}

impl<K: Eq + Hash + Clone> TtftBook<K> {
    /// A book for at most `capacity` keys (at least 1).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        TtftBook {
            index: HashMap::with_capacity(capacity),
            entries: Vec::with_capacity(capacity),
            capacity,
            clock: 0,
        }
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Learns from a finished request of `key`.
    pub fn observe(&mut self, key: &K, obs: &Observation) {
        self.observe_among(key, obs, |_| false);
    }

    /// Learns from a finished request of `key`; a key not held yet starts
    /// from the rates of its peer (a held key for which `is_peer` holds:
    /// another member serving the same model) with the most answers, at
    /// least [`PEER_ANSWERS`], faded to the weight of one and scaled
    /// through its own first prefill (`ttft/member/prior.rs`). The scan of
    /// the table for a peer happens once per new key.
    pub fn observe_among(&mut self, key: &K, obs: &Observation, is_peer: impl Fn(&K) -> bool) {
        self.clock += 1;
        let at = match self.index.get(key) {
            Some(&i) => i,
            None => {
                let prior = self
                    .entries
                    .iter()
                    .filter(|e| e.rates.observations() >= PEER_ANSWERS)
                    .filter(|e| &e.key != key && is_peer(&e.key))
                    .max_by_key(|e| (e.rates.observations(), e.touched))
                    .map_or_else(Rates::default, |e| e.rates.as_prior());
                self.admit(key, prior)
            }
        };
        if let Some(e) = self.entries.get_mut(at) {
            e.rates.observe(obs);
            e.touched = self.clock;
        }
    }

    /// A slot for a new key starting from `rates`: appended, or the least
    /// recently updated key's.
    fn admit(&mut self, key: &K, rates: Rates) -> usize {
        let fresh = Entry {
            key: key.clone(),
            rates,
            ratios: Calibration::default(),
            touched: self.clock,
        };
        if self.entries.len() < self.capacity {
            self.entries.push(fresh);
            let at = self.entries.len() - 1;
            self.index.insert(key.clone(), at);
            return at;
        }
        let oldest = self
            .entries
            .iter()
            .enumerate()
            .min_by_key(|(_, e)| e.touched)
            .map_or(0, |(i, _)| i);
        if let Some(old) = self.entries.get_mut(oldest) {
            self.index.remove(&old.key);
            *old = fresh;
        }
        self.index.insert(key.clone(), oldest);
        oldest
    }

    /// Keeps `key`'s floor ([`Bound::floor_ms`]) only if it was seen from
    /// its member's process `epoch` (the caller's count of its restarts):
    /// a new process may run on faster hardware, and a floor only falls.
    pub fn renew_floor(&mut self, key: &K, epoch: u32) {
        if let Some(e) = self.index.get(key).and_then(|&at| self.entries.get_mut(at)) {
            e.rates.floor.renew(epoch);
        }
    }

    /// Forgets `key` (its member left, or was replaced by other hardware).
    pub fn forget(&mut self, key: &K) {
        if let Some(at) = self.index.remove(key) {
            self.entries.swap_remove(at);
            if let Some(moved) = self.entries.get(at) {
                self.index.insert(moved.key.clone(), at);
            }
        }
    }

    /// The predicted TTFT of `query` on `key`.
    pub fn predict(&self, key: &K, query: &Query<'_>) -> Prediction {
        match self.rates(key) {
            Some(r) => r.predict(query),
            None => Prediction::NoData,
        }
    }

    /// Records, at `now_s` (whole seconds from the caller's origin), the
    /// ratio of a measured TTFT to its prediction on `key`, for a request
    /// dispatched into `stratum` (a key not held is not taken in: it was
    /// never predicted).
    pub fn record_ratio(&mut self, key: &K, stratum: Stratum, ratio: f64, now_s: u32) {
        if let Some(&at) = self.index.get(key) {
            if let Some(e) = self.entries.get_mut(at) {
                e.ratios.push(stratum, ratio, now_s);
            }
        }
    }

    /// Records, at `now_s`, the ratio of a probe on `key` dispatched into
    /// `stratum` ([`Calibration::push_probe`]; a key not held is not taken
    /// in).
    pub fn record_probe(&mut self, key: &K, stratum: Stratum, ratio: f64, now_s: u32) {
        if let Some(e) = self.entry_mut(key) {
            e.ratios.push_probe(stratum, ratio, now_s);
        }
    }

    /// Claims a probe on `key` at `now_s` ([`Calibration::claim_probe`]);
    /// false for a key not held.
    pub fn claim_probe(&mut self, key: &K, now_s: u32) -> bool {
        self.entry_mut(key)
            .is_some_and(|e| e.ratios.claim_probe(now_s))
    }

    fn entry_mut(&mut self, key: &K) -> Option<&mut Entry<K>> {
        let at = *self.index.get(key)?;
        self.entries.get_mut(at)
    }

    /// The calibrated bound at `now_s` on the prediction of `query` on
    /// `key`: the prediction times the [`COVERAGE`] quantile of its recent
    /// ratios of the query's [`Stratum`] ([`Calibration::bound`]), with
    /// the key's floor ([`Bound::floor_ms`]); `None` when there is no
    /// prediction ([`Prediction::NoData`]).
    pub fn bound(&self, key: &K, query: &Query<'_>, now_s: u32) -> Option<Bound> {
        let at = *self.index.get(key)?;
        let e = self.entries.get(at)?;
        match e.rates.predict(query) {
            Prediction::NoData => None,
            Prediction::Estimate(est) => Some(Bound {
                floor_ms: e.rates.floor.ms(),
                ..e.ratios.bound(est, Stratum::of(&query.load), now_s)
            }),
        }
    }

    /// The ratios held for `key`, if it is held.
    pub fn ratios(&self, key: &K) -> Option<&Calibration> {
        let at = *self.index.get(key)?;
        self.entries.get(at).map(|e| &e.ratios)
    }

    /// The prediction corrected by `progress`, received `since_sent_ms` after
    /// the request was sent to `key`, with `busy_others` other slots busy and
    /// `prefill_others` prompt tokens still to prefill in them.
    pub fn correct(
        &self,
        key: &K,
        progress: &Progress,
        since_sent_ms: f64,
        busy_others: u32,
        prefill_others: u32,
    ) -> Prediction {
        match self.rates(key) {
            Some(r) => r.correct(progress, since_sent_ms, busy_others, prefill_others),
            None => Prediction::NoData,
        }
    }

    /// What `key` has learned, if it is held.
    pub fn learned(&self, key: &K) -> Option<Learned> {
        self.rates(key).map(Rates::snapshot)
    }

    fn rates(&self, key: &K) -> Option<&Rates> {
        let at = *self.index.get(key)?;
        self.entries.get(at).map(|e| &e.rates)
    }
}
