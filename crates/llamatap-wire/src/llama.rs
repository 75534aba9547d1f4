//! llama-server's stream and response formats, read without a framework.
//!
//! [`parse_event`] reads one SSE event (from [`crate::sse::SseReader`]) of a
//! streamed response into a [`Delta`]: visible text, hidden (reasoning /
//! tool-call) tokens, finish reason, timings, usage, model, id, in-band error
//! and end of stream. [`parse_response`] reads a whole non-streaming body into
//! [`ResponseFacts`]; [`CountScanner`] reads the counts of one too large to
//! keep, as it passes. All are pure and never fail: input they cannot read
//! gives an empty result. The common event (one token of an OpenAI chat
//! stream) is parsed without allocating, and llama-server's exact token
//! chunk skips the JSON parser altogether (see `fast.rs`).
//! [`parse_model_list`] reads the names of the models a llama-server serves
//! (its `/v1/models` or `/models`).
//!
//! Deliberately not here: routing (the route table in [`crate::request`]
//! names each route's format), assembling a stream's facts over time, and
//! any telemetry.
//!
//! Shapes follow llama.cpp's `tools/server/server-task.cpp`
//! (`to_json_*` of `server_task_result_cmpl_partial` / `_final`) and the
//! stream loop in `server-context.cpp`.

mod anthropic;
mod counts;
mod delta;
mod fast;
mod format;
mod models;
mod native;
mod openai;
mod response;
mod responses;
pub mod server_metrics;
pub mod slots;
mod timings;
mod wire;

#[cfg(test)]
mod tests;

pub use counts::{CountScanner, MAX_FIELD_BYTES};
pub use delta::Delta;
pub use format::StreamFormat;
pub use models::parse_model_list;
pub use response::ResponseFacts;
pub use timings::{duration_ms, Timings, Usage, MAX_MS, MAX_TOKENS};

use crate::sse::SseEvent;

/// Reads one SSE event of a `format` stream. `data: [DONE]` gives a delta
/// with only `done` set; unreadable data gives `Delta::default()`.
pub fn parse_event<'a>(format: StreamFormat, event: &SseEvent<'a>) -> Delta<'a> {
    if event.is_done() {
        return Delta {
            done: true,
            ..Delta::default()
        };
    }
    let data: &'a [u8] = event.data;
    match format {
        StreamFormat::OpenAiChat => {
            fast::token_chunk(data).unwrap_or_else(|| openai::parse_chunk(data, true))
        }
        StreamFormat::OpenAiCompletion => openai::parse_chunk(data, false),
        StreamFormat::Native => native::parse_chunk(data),
        StreamFormat::AnthropicMessages => anthropic::parse_event(event.event, data),
        StreamFormat::OpenAiResponses => responses::parse_event(event.event, data),
    }
}

/// Reads a whole non-streaming `format` response body (including
/// llama-server's `{"error": {..}}` bodies).
pub fn parse_response(format: StreamFormat, body: &[u8]) -> ResponseFacts {
    match format {
        StreamFormat::OpenAiChat => openai::parse_whole(body, true),
        StreamFormat::OpenAiCompletion => openai::parse_whole(body, false),
        StreamFormat::Native => native::parse_whole(body),
        StreamFormat::AnthropicMessages => anthropic::parse_whole(body),
        StreamFormat::OpenAiResponses => responses::parse_whole(body),
    }
}
