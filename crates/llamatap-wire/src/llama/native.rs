//! llama-server's native `/completion` format.
//!
//! Streaming: one event per token with `content`, `stop: false`,
//! `tokens_predicted` and `tokens_evaluated`; the last token event also has
//! `timings`; the final event has `stop: true`, `stop_type`
//! (`eos`/`word`/`limit`), `model`, `timings` and empty `content`. There is no
//! `[DONE]`. A whole response is one such object, or an array of them when
//! the request had several prompts.

use serde::Deserialize;

use super::response::ResponseFacts;
use super::timings::{TimingsWire, Usage};
use super::wire::{parse_object, ErrorField, Flag, Number, Object, Text};
use super::{Delta, Timings};

/// One native result object (streamed event or whole response).
#[derive(Deserialize)]
struct NativeResult<'a> {
    #[serde(borrow, default)]
    content: Text<'a>,
    #[serde(default)]
    stop: Flag,
    #[serde(borrow, default)]
    stop_type: Text<'a>,
    #[serde(borrow, default)]
    model: Text<'a>,
    #[serde(default)]
    tokens_predicted: Number,
    #[serde(default)]
    tokens_evaluated: Number,
    #[serde(default)]
    timings: Object<TimingsWire>,
    #[serde(borrow, default)]
    error: ErrorField<'a>,
}

/// Usage from the token counts; cached tokens come from `timings.cache_n`.
fn usage(evaluated: Number, predicted: Number, timings: Option<Timings>) -> Option<Usage> {
    let usage = Usage {
        input_tokens: evaluated.count(),
        output_tokens: predicted.count(),
        cached_input_tokens: timings.and_then(|t| t.cache_n),
        reasoning_tokens: None,
    };
    (usage != Usage::default()).then_some(usage)
}

/// Reads one streamed native event.
pub(crate) fn parse_chunk(data: &[u8]) -> Delta<'_> {
    let Some(r) = parse_object::<NativeResult<'_>>(data) else {
        return Delta::default();
    };
    let timings = r.timings.0.map(Timings::from);
    let done = r.stop.0;
    Delta {
        usage: if done {
            usage(r.tokens_evaluated, r.tokens_predicted, timings)
        } else {
            None
        },
        visible: r.content.non_empty(),
        finish_reason: if done { r.stop_type.non_empty() } else { None },
        timings,
        model: r.model.non_empty(),
        error: r.error.0,
        done,
        ..Delta::default()
    }
}

/// Reads a whole native response: one object, or an array of them.
pub(crate) fn parse_whole(body: &[u8]) -> ResponseFacts {
    if let Ok(list) = serde_json::from_slice::<Vec<Object<NativeResult<'_>>>>(body) {
        return list
            .into_iter()
            .flat_map(|o| o.0)
            .map(facts)
            .fold(ResponseFacts::default(), ResponseFacts::combine);
    }
    parse_object::<NativeResult<'_>>(body)
        .map(facts)
        .unwrap_or_default()
}

fn facts(r: NativeResult<'_>) -> ResponseFacts {
    let timings = r.timings.0.map(Timings::from);
    ResponseFacts {
        finish_reasons: r
            .stop_type
            .non_empty()
            .map(Into::into)
            .into_iter()
            .collect(),
        usage: usage(r.tokens_evaluated, r.tokens_predicted, timings),
        timings,
        model: r.model.non_empty().map(Into::into),
        response_id: None,
        visible_text_chars: r.content.0.map_or(0, |c| c.chars().count()),
        error: r.error.0.map(Into::into),
    }
}
