//! llama-server's `timings` object and token usage, in every format's spelling.
//!
//! [`Timings`] mirrors llama-server's own counters; [`Usage`] normalises the
//! OpenAI, Anthropic and Responses usage objects to one shape. Deliberately
//! absent: the derived rates (`*_per_second`, `*_per_token_ms`), which the
//! caller can compute, and any aggregation across events.

use std::time::Duration;

use serde::Deserialize;

use super::wire::{Number, Object};

/// Longest llama-server duration believed, in milliseconds (a week): a
/// larger, negative or non-finite `*_ms` is dropped as absurd, never turned
/// into a [`Duration`] that could overflow.
pub const MAX_MS: f64 = 7.0 * 24.0 * 3600.0 * 1000.0;

/// Largest token count believed (10^12): a larger, negative or fractional
/// overflowing count is dropped as absurd, so sums of counts stay far from
/// `u64::MAX`.
pub const MAX_TOKENS: u64 = 1_000_000_000_000;

/// `ms` milliseconds as a [`Duration`], when it is a plausible duration
/// (finite, `0 ..= MAX_MS`). Total: never panics, whatever the number.
pub fn duration_ms(ms: f64) -> Option<Duration> {
    if !(0.0..=MAX_MS).contains(&ms) {
        return None;
    }
    Duration::try_from_secs_f64(ms / 1000.0).ok()
}

/// llama-server's `timings` object (present on final events, and on every
/// event with `timings_per_token`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Timings {
    /// Prompt tokens processed by this request (`prompt_n`); excludes `cache_n`.
    pub prompt_n: Option<u64>,
    /// Prompt processing time in milliseconds (`prompt_ms`).
    pub prompt_ms: Option<f64>,
    /// Tokens generated (`predicted_n`).
    pub predicted_n: Option<u64>,
    /// Generation time in milliseconds (`predicted_ms`).
    pub predicted_ms: Option<f64>,
    /// Prompt tokens reused from the KV cache (`cache_n`).
    pub cache_n: Option<u64>,
}

impl Timings {
    /// llama-server's prompt processing time (`prompt_ms`), when plausible.
    pub fn prefill(&self) -> Option<Duration> {
        self.prompt_ms.and_then(duration_ms)
    }

    /// llama-server's generation time (`predicted_ms`), when plausible.
    pub fn decode(&self) -> Option<Duration> {
        self.predicted_ms.and_then(duration_ms)
    }
}

/// Token usage, normalised across formats.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    /// All prompt tokens, cached ones included (Anthropic's separate
    /// `cache_read_input_tokens` / `cache_creation_input_tokens` are added in).
    pub input_tokens: Option<u64>,
    /// Generated tokens (reasoning included).
    pub output_tokens: Option<u64>,
    /// Prompt tokens served from the cache.
    pub cached_input_tokens: Option<u64>,
    /// Generated tokens spent on reasoning, when reported.
    pub reasoning_tokens: Option<u64>,
}

impl Usage {
    /// `newer`'s fields where present, else `self`'s: how a stream's usage is
    /// assembled (Anthropic sends input tokens first and output tokens last).
    pub fn merge(self, newer: Usage) -> Usage {
        Usage {
            input_tokens: newer.input_tokens.or(self.input_tokens),
            output_tokens: newer.output_tokens.or(self.output_tokens),
            cached_input_tokens: newer.cached_input_tokens.or(self.cached_input_tokens),
            reasoning_tokens: newer.reasoning_tokens.or(self.reasoning_tokens),
        }
    }

    /// Field-wise sum, for responses that carry several results.
    pub(crate) fn add(self, other: Usage) -> Usage {
        let sum = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
        };
        Usage {
            input_tokens: sum(self.input_tokens, other.input_tokens),
            output_tokens: sum(self.output_tokens, other.output_tokens),
            cached_input_tokens: sum(self.cached_input_tokens, other.cached_input_tokens),
            reasoning_tokens: sum(self.reasoning_tokens, other.reasoning_tokens),
        }
    }
}

// === wire forms ===

/// `timings` as sent.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct TimingsWire {
    prompt_n: Number,
    prompt_ms: Number,
    predicted_n: Number,
    predicted_ms: Number,
    cache_n: Number,
}

impl From<TimingsWire> for Timings {
    fn from(w: TimingsWire) -> Self {
        Timings {
            prompt_n: w.prompt_n.count(),
            prompt_ms: w.prompt_ms.millis(),
            predicted_n: w.predicted_n.count(),
            predicted_ms: w.predicted_ms.millis(),
            cache_n: w.cache_n.count(),
        }
    }
}

/// `{ "cached_tokens": n }` / `{ "reasoning_tokens": n }` detail objects.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct Details {
    cached_tokens: Number,
    reasoning_tokens: Number,
}

/// OpenAI chat / completions `usage`.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct OpenAiUsage {
    prompt_tokens: Number,
    completion_tokens: Number,
    prompt_tokens_details: Object<Details>,
    completion_tokens_details: Object<Details>,
}

impl From<OpenAiUsage> for Usage {
    fn from(w: OpenAiUsage) -> Self {
        Usage {
            input_tokens: w.prompt_tokens.count(),
            output_tokens: w.completion_tokens.count(),
            cached_input_tokens: w
                .prompt_tokens_details
                .0
                .and_then(|d| d.cached_tokens.count()),
            reasoning_tokens: w
                .completion_tokens_details
                .0
                .and_then(|d| d.reasoning_tokens.count()),
        }
    }
}

/// OpenAI Responses `usage`.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct ResponsesUsage {
    input_tokens: Number,
    output_tokens: Number,
    input_tokens_details: Object<Details>,
    output_tokens_details: Object<Details>,
}

impl From<ResponsesUsage> for Usage {
    fn from(w: ResponsesUsage) -> Self {
        Usage {
            input_tokens: w.input_tokens.count(),
            output_tokens: w.output_tokens.count(),
            cached_input_tokens: w
                .input_tokens_details
                .0
                .and_then(|d| d.cached_tokens.count()),
            reasoning_tokens: w
                .output_tokens_details
                .0
                .and_then(|d| d.reasoning_tokens.count()),
        }
    }
}

/// Anthropic `usage`: `input_tokens` there excludes cache reads and writes.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct AnthropicUsage {
    input_tokens: Number,
    output_tokens: Number,
    cache_read_input_tokens: Number,
    cache_creation_input_tokens: Number,
}

impl From<AnthropicUsage> for Usage {
    fn from(w: AnthropicUsage) -> Self {
        let cached = w.cache_read_input_tokens.count();
        let created = w.cache_creation_input_tokens.count().unwrap_or(0);
        let input = w.input_tokens.count().map(|n| {
            n.saturating_add(cached.unwrap_or(0))
                .saturating_add(created)
        });
        Usage {
            input_tokens: input,
            output_tokens: w.output_tokens.count(),
            cached_input_tokens: cached,
            reasoning_tokens: None,
        }
    }
}

/// Converts an optional wire object.
pub(crate) fn from_wire<W, T: From<W>>(wire: Object<W>) -> Option<T> {
    wire.0.map(T::from)
}
