//! Learning from llama-server's answer: its `timings.cache_n` (prompt
//! tokens reused from its cache) is the ground truth the index only
//! approximates, since llama-server announces no cache evictions.
//!
//! [`Router::observe`] turns the cached tokens into covered links (tokens
//! spread evenly over the chain's text bytes; a link counts when half of it
//! is covered) and compares them with the decision's prediction:
//! - confirmed: at least the predicted links were cached;
//! - shortfall: fewer were. That says something about this one chain on
//!   this one answer, not about the upstream's whole cache: llama-server
//!   picks the idle slot whose prompt is most similar, and takes the least
//!   recently used one when no slot shares `--slot-prompt-similarity` (10%)
//!   of the prompt, so a prefix still cached on another slot (or in its
//!   host-memory prompt cache) can go unused. Either way the upstream has
//!   just computed this chain's whole prompt and holds it now, which the
//!   index already records (the decision touched it). So a shortfall is
//!   counted and drops nothing: dropping older chains on it once sent
//!   follow-up turns whose prefixes were cached to `cold`;
//! - unpredicted: nothing predicted, something cached (a prefix another
//!   conversation sent, or one the index aged out);
//! - cold: nothing predicted, nothing cached.
//!
//! The index forgets an upstream only on evidence that it restarted (see
//! `Router::forget`). The [`Accuracy`] counters per upstream are
//! monotonic, for the metrics layer to export. Not done here: exporting
//! them, or reading `cache_n` from a response (see `llama::Timings`).

use super::chain::Chain;
use super::choice::Router;
use super::decision::Prediction;

/// Prediction accuracy of one upstream, since start (monotonic counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Accuracy {
    /// Answers observed with a prompt and a token count.
    pub observed: u64,
    /// Of those, decisions that predicted a cached prefix.
    pub predicted: u64,
    /// Predictions the answer confirmed (at least the predicted links cached).
    pub confirmed: u64,
    /// Predictions the answer fell short of (fewer links cached).
    pub shortfalls: u64,
    /// Answers with a cached prefix when none was predicted.
    pub unpredicted: u64,
    /// Predicted cached tokens: each prediction's bytes at its own
    /// answer's tokens-per-byte ratio.
    pub predicted_tokens: u64,
    /// Cached tokens reported (`cache_n`).
    pub cached_tokens: u64,
    /// Prompt tokens reported, cached ones included.
    pub prompt_tokens: u64,
    /// Index links dropped because the upstream restarted.
    pub forgotten_links: u64,
}

/// What an observation taught.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observation {
    /// Nothing to compare: no prompt tokens, an empty chain, or an unknown
    /// upstream.
    Unmeasured,
    /// Nothing predicted and nothing cached.
    Cold,
    /// A cached prefix of `links` links that was not predicted.
    Unpredicted {
        /// Links covered by the cached tokens.
        links: usize,
    },
    /// At least the predicted links were cached.
    Confirmed {
        /// Links covered by the cached tokens.
        links: usize,
    },
    /// Fewer links were cached than predicted.
    Shortfall {
        /// Links predicted.
        predicted: usize,
        /// Links covered by the cached tokens.
        links: usize,
    },
}

impl Router {
    /// Learns from an answer of upstream `upstream` to the request of
    /// `chain`, routed with `prediction` (the decision's), whose prompt had
    /// `prompt_tokens` tokens in all (`usage.prompt_tokens`, or
    /// `timings.prompt_n + timings.cache_n`) of which `cached_tokens` came
    /// from the cache (`timings.cache_n`); see the module docs. Updates the
    /// upstream's [`Accuracy`] and the token estimate ratio.
    pub fn observe(
        &mut self,
        upstream: usize,
        chain: &Chain,
        prediction: &Prediction,
        cached_tokens: u64,
        prompt_tokens: u64,
    ) -> Observation {
        if prompt_tokens == 0 || chain.is_empty() {
            return Observation::Unmeasured;
        }
        let Some(up) = self.upstreams.get_mut(upstream) else {
            return Observation::Unmeasured;
        };
        let cached = cached_tokens.min(prompt_tokens);
        let links = chain.covered_links(cached, prompt_tokens);
        let predicted = prediction.links.min(chain.len());
        let total_bytes = chain.total_bytes();
        let predicted_tokens = match total_bytes {
            0 => 0,
            total => {
                u128::from(prompt_tokens) * u128::from(chain.bytes(predicted)) / u128::from(total)
            }
        };
        let accuracy = &mut up.accuracy;
        accuracy.observed += 1;
        accuracy.cached_tokens = accuracy.cached_tokens.saturating_add(cached);
        accuracy.prompt_tokens = accuracy.prompt_tokens.saturating_add(prompt_tokens);
        accuracy.predicted_tokens = accuracy
            .predicted_tokens
            .saturating_add(u64::try_from(predicted_tokens).unwrap_or(u64::MAX));
        self.observed_tokens = self.observed_tokens.saturating_add(prompt_tokens);
        self.observed_bytes = self.observed_bytes.saturating_add(total_bytes);
        if predicted == 0 {
            if links == 0 {
                return Observation::Cold;
            }
            accuracy.unpredicted += 1;
            return Observation::Unpredicted { links };
        }
        accuracy.predicted += 1;
        if links >= predicted {
            accuracy.confirmed += 1;
            return Observation::Confirmed { links };
        }
        accuracy.shortfalls += 1;
        Observation::Shortfall { predicted, links }
    }
}
