//! Which of llama-server's streaming formats a response uses.
//!
//! The format follows from the route alone
//! ([`crate::request::Route::stream_format`], the one route table). This
//! module only names formats and their terminal events; parsing lives in the
//! per-format modules.

/// A llama-server response format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamFormat {
    /// `/v1/chat/completions`, `/chat/completions`: `chat.completion.chunk` events.
    OpenAiChat,
    /// `/v1/completions`: `text_completion` events with `choices[].text`.
    OpenAiCompletion,
    /// `/completion`, `/completions`, `/infill`: llama-server's own format
    /// (`content`, `stop`, `timings`); no `[DONE]` at the end.
    Native,
    /// `/v1/messages`: Anthropic Messages events with `event:` lines.
    AnthropicMessages,
    /// `/v1/responses`, `/responses`: OpenAI Responses events with `event:` lines.
    OpenAiResponses,
}

impl StreamFormat {
    /// Every format, for tests and label pre-registration.
    pub const ALL: [StreamFormat; 5] = [
        StreamFormat::OpenAiChat,
        StreamFormat::OpenAiCompletion,
        StreamFormat::Native,
        StreamFormat::AnthropicMessages,
        StreamFormat::OpenAiResponses,
    ];

    /// A stable lower-case name, fit for a metric label or span attribute.
    pub fn as_str(&self) -> &'static str {
        match self {
            StreamFormat::OpenAiChat => "openai_chat",
            StreamFormat::OpenAiCompletion => "openai_completion",
            StreamFormat::Native => "native",
            StreamFormat::AnthropicMessages => "anthropic_messages",
            StreamFormat::OpenAiResponses => "openai_responses",
        }
    }

    /// The event that ends a complete answer in this format, as llama-server
    /// writes it; a stream without it was cut short.
    pub fn terminal_event(&self) -> &'static str {
        match self {
            StreamFormat::OpenAiChat | StreamFormat::OpenAiCompletion => "data: [DONE]",
            StreamFormat::Native => "the final event with \"stop\": true",
            StreamFormat::AnthropicMessages => "message_stop",
            StreamFormat::OpenAiResponses => {
                "response.completed (or response.incomplete, response.failed)"
            }
        }
    }
}

impl std::fmt::Display for StreamFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
