//! The rest of an answer in the client's own format: a transformer that
//! reads a continuation's native `/completion` event stream, chunk by
//! chunk as it arrives, and writes what the client's stream goes on with
//! (chat or text-completion chunks with the ids of the client's stream, or
//! native events whose token count carries across the cut), then the
//! stream's end once the target's last event arrives.
//!
//! Pure: bytes in, bytes out, the same whatever the chunking. Deliberately
//! not here: reading the upstream, writing to the client, timeouts (the
//! proxy's forwarding loop), and planning the continuation ([`super::next`]).

use serde_json::Value;

use super::rewrap::{finish_reason, native_event, AnswerUsage, StreamIds};
use crate::llama::{self, StreamFormat};
use crate::sse::SseReader;

/// What the target reported of its own work, from its last event's
/// `timings` (each `None` until reported).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TargetCounts {
    /// Prompt tokens it processed (`prompt_n`): the prefill the cut cost.
    pub prompt_n: Option<u64>,
    /// Prompt tokens it reused from its cache (`cache_n`).
    pub cache_n: Option<u64>,
    /// Tokens it generated (`predicted_n`).
    pub predicted_n: Option<u64>,
}

/// How the client's stream goes on.
#[derive(Clone, Debug)]
pub struct Target {
    /// The client's stream ids (chat or text completion); `None`: the
    /// client's stream is native.
    pub ids: Option<StreamIds>,
    /// Tokens the client had before the cut.
    pub tokens_before: u64,
    /// The client asked for logprobs: each event carries the target's
    /// `completion_probabilities` as its `logprobs.content`.
    pub logprobs: bool,
    /// The client asked for a usage chunk (`stream_options.include_usage`);
    /// a text completion's finish chunk carries usage whatever it asked.
    pub include_usage: bool,
}

/// Rewrites a continuation's native events into the client's stream.
#[derive(Debug)]
pub struct Rewriter {
    reader: SseReader,
    target: Target,
    counts: TargetCounts,
    ended: bool,
}

impl Rewriter {
    /// A rewriter for `target`; native events above `max_event_bytes` are
    /// skipped (llama-server's are far smaller).
    pub fn new(target: Target, max_event_bytes: usize) -> Self {
        Rewriter {
            reader: SseReader::new(max_event_bytes),
            target,
            counts: TargetCounts::default(),
            ended: false,
        }
    }

    /// Reads one chunk of the target's body and appends to `out` what the
    /// client gets of it; nothing once the end was written. Returns whether
    /// the answer's end (finish chunk, usage, `[DONE]`; or the native last
    /// event) is now in `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> bool {
        if self.ended {
            return true;
        }
        let Rewriter {
            reader,
            target,
            counts,
            ended,
        } = self;
        reader.feed(chunk, |event| {
            if *ended {
                return;
            }
            let delta = llama::parse_event(StreamFormat::Native, event);
            let Some(ids) = &target.ids else {
                out.extend_from_slice(&native_event(event.data, target.tokens_before));
                if delta.done {
                    *ended = true;
                    keep_counts(counts, &delta);
                }
                return;
            };
            if let Some(text) = delta.visible.as_deref() {
                let probs = target.logprobs.then(|| probabilities(event.data)).flatten();
                out.extend_from_slice(&ids.content_event(text, probs.as_ref()));
            }
            if delta.done {
                *ended = true;
                keep_counts(counts, &delta);
                let usage = delta.usage.map(|u| AnswerUsage {
                    prompt_tokens: u
                        .input_tokens
                        .unwrap_or(0)
                        .saturating_sub(target.tokens_before),
                    completion_tokens: target
                        .tokens_before
                        .saturating_add(u.output_tokens.unwrap_or(0)),
                });
                let usage = usage.filter(|_| ids.text_completion || target.include_usage);
                let reason = finish_reason(delta.finish_reason.as_deref());
                out.extend_from_slice(&ids.finish_events(reason, usage));
            }
        });
        *ended
    }

    /// The answer's end was written.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// What the target reported of its work (once its last event came).
    pub fn counts(&self) -> TargetCounts {
        self.counts
    }
}

fn keep_counts(counts: &mut TargetCounts, delta: &llama::Delta<'_>) {
    if let Some(t) = delta.timings {
        counts.prompt_n = t.prompt_n;
        counts.cache_n = t.cache_n;
        counts.predicted_n = t.predicted_n;
    }
}

/// A native event's `completion_probabilities`, for the client's logprobs.
fn probabilities(data: &[u8]) -> Option<Value> {
    let mut v: Value = serde_json::from_slice(data).ok()?;
    v.get_mut("completion_probabilities").map(Value::take)
}

#[cfg(test)]
mod tests;
