//! [`Delta`]: what one SSE event of a llama-server stream carried.
//!
//! A delta is a stateless reading of one event. Assembling a whole stream
//! (first token time, first model name, last timings) is the caller's job.

use std::borrow::Cow;

use super::timings::{Timings, Usage};

/// What one SSE event carried. Strings borrow from the event's bytes unless
/// JSON escapes forced a copy.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Delta<'a> {
    /// Non-empty visible answer text, JSON escapes decoded.
    pub visible: Option<Cow<'a, str>>,
    /// A token arrived on a non-visible channel: reasoning / thinking text or
    /// a tool-call delta.
    pub hidden_token: bool,
    /// Why generation stopped, verbatim from the format: OpenAI
    /// `stop`/`length`/`tool_calls`, native `eos`/`word`/`limit`, Anthropic
    /// `end_turn`/`max_tokens`/`tool_use`, Responses `completed`/`incomplete`
    /// (or the `incomplete_details.reason`).
    pub finish_reason: Option<Cow<'a, str>>,
    /// llama-server timings. They may arrive on more than one event (the last
    /// token and the final event): keep the last.
    pub timings: Option<Timings>,
    /// Token usage reported by this event. Formats split it across events:
    /// fold with [`Usage::merge`].
    pub usage: Option<Usage>,
    /// Model name, on the events that carry one; keep the first.
    pub model: Option<Cow<'a, str>>,
    /// Response / completion id, on the events that carry one.
    pub response_id: Option<Cow<'a, str>>,
    /// Message of an in-band error event.
    pub error: Option<Cow<'a, str>>,
    /// The stream's normal terminal event: `[DONE]`, native `"stop": true`,
    /// Anthropic `message_stop`, Responses `response.completed` / `failed` /
    /// `incomplete`. An error event is reported in `error` instead (llama-server
    /// ends the stream right after one, without `[DONE]`).
    pub done: bool,
}

impl Delta<'_> {
    /// A copy that owns its strings, to keep beyond the event's lifetime.
    pub fn into_owned(self) -> Delta<'static> {
        let own = |c: Option<Cow<'_, str>>| c.map(|s| Cow::Owned(s.into_owned()));
        Delta {
            visible: own(self.visible),
            hidden_token: self.hidden_token,
            finish_reason: own(self.finish_reason),
            timings: self.timings,
            usage: self.usage,
            model: own(self.model),
            response_id: own(self.response_id),
            error: own(self.error),
            done: self.done,
        }
    }
}
