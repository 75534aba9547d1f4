//! [`ResponseFacts`]: what a whole non-streaming response body says.

use super::timings::{Timings, Usage};

/// Facts read from a whole (non-streaming) JSON response body. A body that
/// is not JSON, or not an object of the expected shape, gives the default.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResponseFacts {
    /// One finish reason per choice / result, verbatim (see [`super::Delta::finish_reason`]).
    pub finish_reasons: Vec<String>,
    /// llama-server timings (chat, completions and native bodies only).
    pub timings: Option<Timings>,
    /// Token usage, normalised.
    pub usage: Option<Usage>,
    /// Model name as reported (llama-server reports the loaded file's name).
    pub model: Option<String>,
    /// Response / completion / message id.
    pub response_id: Option<String>,
    /// Unicode scalar values of visible answer text over all choices
    /// (reasoning and tool-call arguments excluded).
    pub visible_text_chars: usize,
    /// Message of an error body (`{"error": {..}}`).
    pub error: Option<String>,
}

impl ResponseFacts {
    /// Joins the facts of several results of one response (native arrays):
    /// lists and counts add up, single values keep the first present.
    pub(crate) fn combine(self, next: ResponseFacts) -> ResponseFacts {
        let mut finish_reasons = self.finish_reasons;
        finish_reasons.extend(next.finish_reasons);
        let usage = match (self.usage, next.usage) {
            (Some(a), Some(b)) => Some(a.add(b)),
            (a, b) => a.or(b),
        };
        ResponseFacts {
            finish_reasons,
            timings: self.timings.or(next.timings),
            usage,
            model: self.model.or(next.model),
            response_id: self.response_id.or(next.response_id),
            visible_text_chars: self.visible_text_chars + next.visible_text_chars,
            error: self.error.or(next.error),
        }
    }
}
