//! OpenAI-compatible chat (`chat.completion[.chunk]`) and legacy completions
//! (`text_completion`) as llama-server writes them.
//!
//! Streaming: the first chat chunk carries only `role` (`content: null`);
//! then one chunk per token with `delta.content`, `delta.reasoning_content`
//! or `delta.tool_calls`; the last token chunk and the final chunk (with
//! `finish_reason`) both carry `timings`; an optional usage chunk has empty
//! `choices`; `data: [DONE]` ends the stream. `/v1/completions` always puts
//! `usage` on its final chunk. Only the first choice of a chunk is read
//! (llama-server sends one per chunk, even with `n > 1`).

use serde::Deserialize;

use super::response::ResponseFacts;
use super::timings::{from_wire, OpenAiUsage, TimingsWire};
use super::wire::{parse_object, ErrorField, First, List, Object, Present, Text};
use super::Delta;

/// Top-level fields of a streamed chunk.
#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow, default)]
    choices: First<StreamChoice<'a>>,
    #[serde(borrow, default)]
    id: Text<'a>,
    #[serde(borrow, default)]
    model: Text<'a>,
    #[serde(default)]
    usage: Object<OpenAiUsage>,
    #[serde(default)]
    timings: Object<TimingsWire>,
    #[serde(borrow, default)]
    error: ErrorField<'a>,
}

/// One streamed choice of either endpoint.
#[derive(Deserialize)]
struct StreamChoice<'a> {
    #[serde(borrow, default)]
    delta: Object<ChatDelta<'a>>,
    #[serde(borrow, default)]
    text: Text<'a>,
    #[serde(borrow, default)]
    finish_reason: Text<'a>,
}

/// `choices[].delta` of a chat chunk.
#[derive(Deserialize)]
struct ChatDelta<'a> {
    #[serde(borrow, default)]
    content: Text<'a>,
    #[serde(default)]
    reasoning_content: Present,
    #[serde(default)]
    tool_calls: Present,
}

/// Reads one streamed chat (`chat == true`) or completions event.
pub(crate) fn parse_chunk(data: &[u8], chat: bool) -> Delta<'_> {
    let Some(env) = parse_object::<Chunk<'_>>(data) else {
        return Delta::default();
    };
    let mut delta = Delta {
        timings: from_wire(env.timings),
        usage: from_wire(env.usage),
        model: env.model.non_empty(),
        response_id: env.id.non_empty(),
        error: env.error.0,
        ..Delta::default()
    };
    if let Some(choice) = env.choices.0 {
        delta.finish_reason = choice.finish_reason.non_empty();
        if chat {
            if let Some(d) = choice.delta.0 {
                delta.visible = d.content.non_empty();
                delta.hidden_token = d.reasoning_content.0 || d.tool_calls.0;
            }
        } else {
            delta.visible = choice.text.non_empty();
        }
    }
    delta
}

// === whole responses ===

/// Top-level fields of a whole response (all choices kept).
#[derive(Deserialize)]
struct Whole<'a> {
    #[serde(borrow, default)]
    choices: List<WholeChoice<'a>>,
    #[serde(borrow, default)]
    id: Text<'a>,
    #[serde(borrow, default)]
    model: Text<'a>,
    #[serde(default)]
    usage: Object<OpenAiUsage>,
    #[serde(default)]
    timings: Object<TimingsWire>,
    #[serde(borrow, default)]
    error: ErrorField<'a>,
}

#[derive(Deserialize)]
struct WholeChoice<'a> {
    #[serde(borrow, default)]
    message: Object<Message<'a>>,
    #[serde(borrow, default)]
    text: Text<'a>,
    #[serde(borrow, default)]
    finish_reason: Text<'a>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    content: Text<'a>,
}

/// Reads a whole `chat.completion` (`chat == true`) or `text_completion` body.
pub(crate) fn parse_whole(body: &[u8], chat: bool) -> ResponseFacts {
    let Some(whole) = parse_object::<Whole<'_>>(body) else {
        return ResponseFacts::default();
    };
    let mut facts = ResponseFacts {
        timings: from_wire(whole.timings),
        usage: from_wire(whole.usage),
        model: whole.model.non_empty().map(Into::into),
        response_id: whole.id.non_empty().map(Into::into),
        error: whole.error.0.map(Into::into),
        ..ResponseFacts::default()
    };
    for choice in whole.choices.0 {
        facts
            .finish_reasons
            .extend(choice.finish_reason.non_empty().map(Into::into));
        let text = if chat {
            choice.message.0.and_then(|m| m.content.0)
        } else {
            choice.text.0
        };
        facts.visible_text_chars += text.map_or(0, |t| t.chars().count());
    }
    facts
}
