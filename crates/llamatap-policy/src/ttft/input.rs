//! What the predictor is given: a finished request's facts to learn from
//! ([`Observation`]), a request to predict ([`Query`], [`Load`]), and a
//! prefill's progress to correct by ([`Progress`]).
//!
//! Plain values, copied from llama-server's JSON and the proxy's own counts
//! by the caller; nothing here parses or measures.

/// llama-server's `timings` of a finished answer (the final stream event,
/// or a non-streamed response's `timings`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timings {
    /// `prompt_n`: prompt tokens newly processed (the cached ones excluded).
    pub prompt_n: u32,
    /// `prompt_ms`: the prefill's time, milliseconds.
    pub prompt_ms: f64,
    /// `cache_n`: prompt tokens reused from the KV cache.
    pub cache_n: u32,
    /// `predicted_n`: tokens generated.
    pub predicted_n: u32,
    /// `predicted_ms`: the decode's time, milliseconds.
    pub predicted_ms: f64,
}

/// One finished request, as the predictor learns from it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Observation {
    /// llama-server's `timings`.
    pub timings: Timings,
    /// Slots of the member busy with other requests when this one's
    /// prefill started (its first progress event; else when dispatched).
    pub busy_others: u32,
    /// Prompt tokens of other requests prefilled while this one prefilled
    /// (each other prefill's new tokens times the share of its time that
    /// overlapped this one's): llama-server fills each batch with every
    /// pending prompt, in slot order, so this one's `prompt_ms` covers them
    /// too.
    pub prefill_others: u32,
    /// Prompt tokens of other requests prefilled between this one's
    /// dispatch and its prefill's start: the batches it waited for (a
    /// prompt that reached llama-server while another's batch ran starts
    /// after that batch). Not in its `prompt_ms`.
    pub prefill_before: u32,
    /// The prompt tokens the busy slots still had to prefill when this
    /// request was dispatched (its prediction's
    /// [`Estimate::ahead_tokens`](super::Estimate::ahead_tokens)): with
    /// `prefill_before` and `prefill_others`, it teaches how much of them
    /// this request's first token waits for.
    pub beside_at_dispatch: u32,
    /// The request's `max_tokens`, if it set one: teaches the share of it
    /// answers use, for when a busy slot will free.
    pub max_tokens: Option<u32>,
    /// The prompt's size in the caller's byte measure (the same measure it
    /// passes as [`PromptSize::Bytes`]), to learn bytes per token; `None`
    /// when not known.
    pub prompt_bytes: Option<u64>,
    /// The TTFT measured by the caller (request sent → first token, ms),
    /// only when the request started at once (a free slot, nothing queued
    /// ahead, no other prompt prefilling when it was sent): it teaches the
    /// fixed per-request overhead (`ttft − prompt_ms`). `None` otherwise.
    /// Not learned from when `prefill_before` is above 0: a prompt sent
    /// just after this one went first, and its prefill is in this TTFT.
    pub ttft_ms: Option<f64>,
    /// Whether the request was predicted with nothing cached
    /// ([`Query::cached`] of 0): the tokens llama-server still reused for it
    /// (`cache_n`: the chat template's head, which nearly every prompt
    /// shares) teach how many such a prompt finds cached.
    pub predicted_uncached: bool,
    /// Request sent → llama-server's first `prompt_progress` event (the 0%
    /// one, when the slot started), ms, when the request asked for progress
    /// and started at once: the part of the overhead before the prefill.
    /// Not learned from when `prefill_before` is above 0, as `ttft_ms`.
    pub started_ms: Option<f64>,
    /// The member's process the answer came from: the caller's count of
    /// its restarts (0 when not counted). A floor is of one process
    /// ([`TtftBook::renew_floor`](super::TtftBook::renew_floor)).
    pub process: u32,
}

/// How big a prompt is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptSize {
    /// Tokens, counted (the member's tokenizer, or token ids in the body).
    Tokens(u32),
    /// Bytes only: converted with the tokens-per-bytes line learned from
    /// this member's observations that carried `prompt_bytes` (4 bytes per
    /// token until then).
    Bytes(u64),
}

/// An answer in flight on the member, for when a slot will free.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InFlight {
    /// Tokens generated so far, as its stream counted them (0: not
    /// counted, or none yet).
    pub generated: u32,
    /// The request's `max_tokens` (or `n_predict`), if it set one.
    pub max_tokens: Option<u32>,
    /// Prompt tokens it still has to prefill (0 once its first token came;
    /// its estimate of new tokens before its first progress event).
    pub prefill_left: u32,
    /// Milliseconds since its first token (0 before it, or not known): at
    /// the member's decode rate, the tokens it has generated when
    /// `generated` is not counted (a count, when there is one, wins).
    pub decoding_ms: u32,
    /// Milliseconds its slot has spent on `prefill_left` so far: since the
    /// progress event that reported it (0 before its slot started, or
    /// not known). llama-server reports a batch's progress only when the
    /// batch is done, so a prompt of one batch says nothing between its
    /// start and its first token; at the member's prefill rate this time
    /// says how much of the batch is behind it.
    pub prefilling_ms: u32,
    /// Tokens already in its slot when `prefill_left` was reported (the
    /// progress event's `processed`: the cached ones and those done), which
    /// the rest attends to: with them the member's curve says how long the
    /// rest takes. 0 when not known.
    pub prefill_context: u32,
}

/// The member's load when the request would be dispatched.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Load<'a> {
    /// The member's slots (`-np`); 0 when unknown (a free slot is assumed,
    /// and the estimate is of low confidence).
    pub slots: u32,
    /// Slots busy now.
    pub busy: u32,
    /// Requests that will take a slot of this member before this one
    /// (queued in the proxy for it, or deferred inside llama-server).
    pub queue_ahead: u32,
    /// What is known of the busy slots' answers: the first `busy` entries
    /// are used; a busy slot without one is assumed half way through a
    /// typical answer.
    pub in_flight: &'a [InFlight],
}

/// A request to predict.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Query<'a> {
    /// The whole prompt's size (cached part included).
    pub prompt: PromptSize,
    /// The part of the prompt the member most likely holds in its KV cache
    /// (the affinity book's estimate, in tokens or bytes; 0 when none).
    pub cached: PromptSize,
    /// The member's load.
    pub load: Load<'a>,
}

/// A `prompt_progress` event of llama-server (`"return_progress": true`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// `total`: the prompt's tokens.
    pub total: u32,
    /// `cache`: tokens reused from the KV cache.
    pub cache: u32,
    /// `processed`: tokens in the slot so far, the cached ones included.
    pub processed: u32,
    /// `time_ms`: milliseconds since the slot started this prompt.
    pub time_ms: u64,
}
