//! OpenAI Responses (`/v1/responses`) as llama-server writes it.
//!
//! Streaming: `response.created`, `response.in_progress`,
//! `response.output_item.added`, `response.content_part.added`, then
//! `response.output_text.delta` / `response.reasoning_text.delta` /
//! `response.function_call_arguments.delta` per token, the `*.done` events,
//! and `response.completed` (response id, model, status, usage) with
//! llama-server's `timings` beside `response` in the event data. The last
//! token event carries `timings` too. No `[DONE]`. llama-server reports
//! `status: "completed"` even when generation hit the token limit, and sends
//! a mid-stream error as a bare `data: {"error": {..}}` without `event:`.

use serde::Deserialize;

use super::response::ResponseFacts;
use super::timings::{from_wire, ResponsesUsage, TimingsWire};
use super::wire::{parse_object, ErrorField, List, Object, Text};
use super::Delta;

/// One event's data object.
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Text<'a>,
    #[serde(borrow, default)]
    delta: Text<'a>,
    #[serde(borrow, default)]
    item: Object<Item<'a>>,
    #[serde(borrow, default)]
    response: Object<Response<'a>>,
    #[serde(default)]
    timings: Object<TimingsWire>,
    #[serde(borrow, default)]
    error: ErrorField<'a>,
    #[serde(borrow, default)]
    message: Text<'a>,
}

/// `item` of `response.output_item.added`, and output items of a whole response.
#[derive(Deserialize)]
struct Item<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Text<'a>,
    #[serde(borrow, default)]
    content: List<Part<'a>>,
}

/// A content part of a message item.
#[derive(Deserialize)]
struct Part<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Text<'a>,
    #[serde(borrow, default)]
    text: Text<'a>,
}

/// The `response` object (also a whole non-streaming body).
#[derive(Deserialize)]
struct Response<'a> {
    #[serde(borrow, default)]
    id: Text<'a>,
    #[serde(borrow, default)]
    model: Text<'a>,
    #[serde(borrow, default)]
    status: Text<'a>,
    #[serde(borrow, default)]
    incomplete_details: Object<Incomplete<'a>>,
    #[serde(default)]
    usage: Object<ResponsesUsage>,
    #[serde(borrow, default)]
    error: ErrorField<'a>,
    #[serde(borrow, default)]
    output: List<Item<'a>>,
    #[serde(default)]
    timings: Object<TimingsWire>,
}

#[derive(Deserialize)]
struct Incomplete<'a> {
    #[serde(borrow, default)]
    reason: Text<'a>,
}

/// Event types that carry one generated token on a hidden channel.
const HIDDEN_DELTAS: [&[u8]; 4] = [
    b"response.reasoning_text.delta",
    b"response.reasoning_summary_text.delta",
    b"response.function_call_arguments.delta",
    b"response.refusal.delta",
];

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
        timings: from_wire(ev.timings),
        error: ev.error.0,
        ..Delta::default()
    };
    match name {
        b"response.output_text.delta" => delta.visible = ev.delta.non_empty(),
        b"response.output_item.added" => {
            let kind = ev.item.0.and_then(|i| i.kind.0);
            delta.hidden_token = kind.as_deref() == Some("function_call");
        }
        b"response.completed" | b"response.incomplete" | b"response.failed" => delta.done = true,
        b"error" => delta.error = delta.error.or(ev.message.non_empty()),
        name if HIDDEN_DELTAS.contains(&name) => {
            delta.hidden_token = ev.delta.non_empty().is_some()
        }
        _ => {}
    }
    if let Some(r) = ev.response.0 {
        delta.model = r.model.non_empty();
        delta.response_id = r.id.non_empty();
        delta.usage = from_wire(r.usage);
        delta.error = delta.error.or(r.error.0);
        if delta.done {
            let reason = r.incomplete_details.0.and_then(|d| d.reason.non_empty());
            delta.finish_reason = reason.or(r.status.non_empty());
        }
    }
    delta
}

/// Reads a whole Responses body (llama-server adds no timings to it).
pub(crate) fn parse_whole(body: &[u8]) -> ResponseFacts {
    let Some(r) = parse_object::<Response<'_>>(body) else {
        return ResponseFacts::default();
    };
    let reason = r.incomplete_details.0.and_then(|d| d.reason.non_empty());
    let texts = r
        .output
        .0
        .iter()
        .filter(|i| i.kind.0.as_deref() == Some("message"));
    let parts = texts
        .flat_map(|i| i.content.0.iter())
        .filter(|p| p.kind.0.as_deref() == Some("output_text"));
    ResponseFacts {
        finish_reasons: reason
            .or(r.status.non_empty())
            .map(Into::into)
            .into_iter()
            .collect(),
        timings: from_wire(r.timings),
        usage: from_wire(r.usage),
        model: r.model.non_empty().map(Into::into),
        response_id: r.id.non_empty().map(Into::into),
        visible_text_chars: parts
            .map(|p| p.text.0.as_deref().map_or(0, |t| t.chars().count()))
            .sum(),
        error: r.error.0.map(Into::into),
    }
}
