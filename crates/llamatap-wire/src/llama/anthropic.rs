//! Anthropic Messages (`/v1/messages`) as llama-server writes it.
//!
//! Streaming: `message_start` (id, model, usage with input and
//! `cache_read_input_tokens`), `content_block_start`, `content_block_delta`
//! with `text_delta` / `thinking_delta` / `input_json_delta` /
//! `signature_delta`, `content_block_stop`, `message_delta` (`stop_reason`,
//! `usage.output_tokens`), `message_stop`. llama-server puts no `timings`
//! anywhere in this format, sends no `[DONE]`, and sends a mid-stream error
//! as `event: error` whose data is the bare error object
//! (`{"code":..,"message":..,"type":"server_error"}`), not Anthropic's
//! `{"type":"error","error":{..}}` (both are understood).

use std::borrow::Cow;

use serde::Deserialize;

use super::response::ResponseFacts;
use super::timings::{from_wire, AnthropicUsage};
use super::wire::{parse_object, ErrorField, List, Object, Present, Text};
use super::Delta;

/// One event's data object (all event types share it).
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Text<'a>,
    #[serde(borrow, default)]
    message: MessageField<'a>,
    #[serde(borrow, default)]
    delta: Object<EventDelta<'a>>,
    #[serde(borrow, default)]
    content_block: Object<Block<'a>>,
    #[serde(default)]
    usage: Object<AnthropicUsage>,
    #[serde(borrow, default)]
    error: ErrorField<'a>,
}

/// `message`: an object on `message_start`, a string in llama-server's errors.
#[derive(Default)]
struct MessageField<'a> {
    start: Option<MessageStart<'a>>,
    text: Option<Cow<'a, str>>,
}

impl<'de: 'a, 'a> Deserialize<'de> for MessageField<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Untagged by hand: an object, else a string, else nothing.
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either<'a> {
            Start(#[serde(borrow)] MessageStart<'a>),
            Text(#[serde(borrow)] Text<'a>),
        }
        Ok(match Either::deserialize(d)? {
            Either::Start(start) => MessageField {
                start: Some(start),
                text: None,
            },
            Either::Text(text) => MessageField {
                start: None,
                text: text.non_empty(),
            },
        })
    }
}

/// `message` of `message_start` (and the whole non-streaming response).
#[derive(Deserialize)]
struct MessageStart<'a> {
    #[serde(borrow, default)]
    id: Text<'a>,
    #[serde(borrow, default)]
    model: Text<'a>,
    #[serde(default)]
    usage: Object<AnthropicUsage>,
}

/// `delta` of `content_block_delta` and `message_delta`.
#[derive(Deserialize)]
struct EventDelta<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Text<'a>,
    #[serde(borrow, default)]
    text: Text<'a>,
    #[serde(default)]
    thinking: Present,
    #[serde(default)]
    partial_json: Present,
    #[serde(borrow, default)]
    stop_reason: Text<'a>,
}

/// `content_block` of `content_block_start`, and content blocks of a whole message.
#[derive(Deserialize)]
struct Block<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Text<'a>,
    #[serde(borrow, default)]
    text: Text<'a>,
}

/// Reads one streamed event; `name` is the SSE `event:` field (may be empty).
pub(crate) fn parse_event<'a>(name: &[u8], data: &'a [u8]) -> Delta<'a> {
    let Some(ev) = parse_object::<Event<'a>>(data) else {
        return Delta::default();
    };
    let kind = ev.kind.0.as_deref().unwrap_or_default();
    let name = if name.is_empty() {
        kind.as_bytes()
    } else {
        name
    };
    let mut delta = Delta {
        error: ev.error.0,
        ..Delta::default()
    };
    match name {
        b"message_start" => {
            if let Some(start) = ev.message.start {
                delta.model = start.model.non_empty();
                delta.response_id = start.id.non_empty();
                delta.usage = from_wire(start.usage);
            }
        }
        b"content_block_start" => {
            let block = ev.content_block.0.and_then(|b| b.kind.0);
            delta.hidden_token = block.as_deref() == Some("tool_use");
        }
        b"content_block_delta" => {
            if let Some(d) = ev.delta.0 {
                match d.kind.0.as_deref() {
                    Some("text_delta") => delta.visible = d.text.non_empty(),
                    Some("thinking_delta") => delta.hidden_token = d.thinking.0,
                    Some("input_json_delta") => delta.hidden_token = d.partial_json.0,
                    _ => {}
                }
            }
        }
        b"message_delta" => {
            delta.finish_reason = ev.delta.0.and_then(|d| d.stop_reason.non_empty());
            delta.usage = from_wire(ev.usage);
        }
        b"message_stop" => delta.done = true,
        b"error" => {
            let bare = ev.message.text.or(Some(Cow::Borrowed("error")));
            delta.error = delta.error.or(bare);
        }
        _ => {}
    }
    delta
}

// === whole responses ===

/// A whole non-streaming message.
#[derive(Deserialize)]
struct Whole<'a> {
    #[serde(borrow, default)]
    id: Text<'a>,
    #[serde(borrow, default)]
    model: Text<'a>,
    #[serde(borrow, default)]
    content: List<Block<'a>>,
    #[serde(borrow, default)]
    stop_reason: Text<'a>,
    #[serde(default)]
    usage: Object<AnthropicUsage>,
    #[serde(borrow, default)]
    error: ErrorField<'a>,
}

/// Reads a whole Anthropic message body (llama-server adds no timings).
pub(crate) fn parse_whole(body: &[u8]) -> ResponseFacts {
    let Some(w) = parse_object::<Whole<'_>>(body) else {
        return ResponseFacts::default();
    };
    let visible = w
        .content
        .0
        .iter()
        .filter(|b| b.kind.0.as_deref() == Some("text"));
    ResponseFacts {
        finish_reasons: w
            .stop_reason
            .non_empty()
            .map(Into::into)
            .into_iter()
            .collect(),
        timings: None,
        usage: from_wire(w.usage),
        model: w.model.non_empty().map(Into::into),
        response_id: w.id.non_empty().map(Into::into),
        visible_text_chars: visible
            .map(|b| b.text.0.as_deref().map_or(0, |t| t.chars().count()))
            .sum(),
        error: w.error.0.map(Into::into),
    }
}
