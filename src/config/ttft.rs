//! `[ttft]`: the TTFT predictor's settings in the proxy, as written and
//! validated.
//!
//! Validation only: the prediction is [`crate::ttft`]'s, asking for and
//! reading progress events [`crate::proxy`]'s (its `progress` module).

use serde::Deserialize;

/// `[ttft]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTtft {
    /// Ask llama-server for prompt progress events on streamed generating
    /// requests, and correct the prediction by them; default `true`.
    pub prompt_progress: Option<bool>,
    /// Keep the objectives admitted: a prompt that would push the first
    /// token of an answer admitted with a TTFT objective past it waits for
    /// that first token; default `false`.
    pub keep_promises: Option<bool>,
    /// Send the prompts to a member in the order they were dispatched to
    /// it: a prompt waits until those dispatched before it to its member
    /// have started (their first progress event); default `false`.
    pub sequence_prompts: Option<bool>,
}

/// `[ttft]`, validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ttft {
    /// Ask llama-server for prompt progress events (`return_progress`).
    pub prompt_progress: bool,
    /// Hold a prompt that would break an earlier answer's objective.
    pub keep_promises: bool,
    /// Hold a prompt until those dispatched before it to its member started.
    pub sequence_prompts: bool,
}

impl Default for Ttft {
    fn default() -> Self {
        Ttft {
            prompt_progress: true,
            keep_promises: false,
            sequence_prompts: false,
        }
    }
}

/// Validates `[ttft]`.
pub fn ttft(raw: RawTtft) -> Ttft {
    Ttft {
        prompt_progress: raw
            .prompt_progress
            .unwrap_or(Ttft::default().prompt_progress),
        keep_promises: raw.keep_promises.unwrap_or(Ttft::default().keep_promises),
        sequence_prompts: raw
            .sequence_prompts
            .unwrap_or(Ttft::default().sequence_prompts),
    }
}
