//! The continuation's native events in the client's own format: chat
//! chunks or text-completion chunks with the ids of the client's stream
//! ([`StreamIds`], read from its first event), the end of the stream
//! (finish chunk, usage, `[DONE]`), and native events passed on with their
//! token count carried across the cut ([`native_event`]).
//!
//! Deliberately not here: reading the native events ([`crate::llama`]).

use serde::Serialize;
use serde_json::Value;

/// The identity of the client's stream, read from its first chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamIds {
    /// `id`, shared by every chunk of the stream.
    pub id: String,
    /// `created` of the first chunk.
    pub created: i64,
    /// `model`.
    pub model: String,
    /// `system_fingerprint`, when the chunk had one.
    pub system_fingerprint: Option<String>,
    /// `choices[0].index` (0 when absent).
    pub index: u64,
    /// Chat chunks, or text-completion chunks.
    pub text_completion: bool,
}

/// Reads [`StreamIds`] from a chat or text-completion chunk's data (an SSE
/// event's `data`, without `data: `); `None` unless it has a string `id`,
/// an integer `created` and a string `model`.
pub fn stream_ids(chunk_data: &[u8]) -> Option<StreamIds> {
    let v: Value = serde_json::from_slice(chunk_data).ok()?;
    Some(StreamIds {
        id: v.get("id")?.as_str()?.to_string(),
        created: v.get("created")?.as_i64()?,
        model: v.get("model")?.as_str()?.to_string(),
        system_fingerprint: v
            .get("system_fingerprint")
            .and_then(Value::as_str)
            .map(str::to_string),
        index: v
            .pointer("/choices/0/index")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        text_completion: v.get("object").and_then(Value::as_str) == Some("text_completion"),
    })
}

/// Usage of the whole answer, for the final chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnswerUsage {
    /// The conversation's prompt tokens.
    pub prompt_tokens: u64,
    /// Every token of the answer, before and after the cut.
    pub completion_tokens: u64,
}

/// One choice of a chat chunk, fields in llama-server's order.
#[derive(Serialize)]
struct ChatChoice<'a> {
    finish_reason: Option<&'a str>,
    index: u64,
    delta: Delta<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    logprobs: Option<Logprobs<'a>>,
}

/// One choice of a text-completion chunk, fields in llama-server's order.
#[derive(Serialize)]
struct TextChoice<'a> {
    text: &'a str,
    index: u64,
    logprobs: Option<Logprobs<'a>>,
    finish_reason: Option<&'a str>,
}

/// `{"content": [...]}`: each token's entry as llama-server gives it.
#[derive(Serialize)]
struct Logprobs<'a> {
    content: &'a Value,
}

/// A choice's delta: `{"content": ...}`, or `{}` in the finish chunk.
#[derive(Serialize)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
}

/// The usage object, fields in llama-server's order.
#[derive(Serialize)]
struct Usage {
    completion_tokens: u64,
    prompt_tokens: u64,
    total_tokens: u64,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Choices<'a> {
    Chat(Vec<ChatChoice<'a>>),
    Text(Vec<TextChoice<'a>>),
}

/// A chunk, fields in llama-server's order.
#[derive(Serialize)]
struct Chunk<'a> {
    choices: Choices<'a>,
    created: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_fingerprint: Option<&'a str>,
    object: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
    /// A text-completion chunk has its id last.
    #[serde(rename = "id", skip_serializing_if = "Option::is_none")]
    id_last: Option<&'a str>,
}

impl StreamIds {
    /// One SSE event, `data: <chunk>\n\n`, with this stream's ids.
    fn event(&self, choices: Choices<'_>, usage: Option<Usage>) -> Vec<u8> {
        let (id, id_last) = if self.text_completion {
            (None, Some(self.id.as_str()))
        } else {
            (Some(self.id.as_str()), None)
        };
        let c = Chunk {
            choices,
            created: self.created,
            id,
            model: &self.model,
            system_fingerprint: self.system_fingerprint.as_deref(),
            object: if self.text_completion {
                "text_completion"
            } else {
                "chat.completion.chunk"
            },
            usage,
            id_last,
        };
        let mut out = b"data: ".to_vec();
        // A struct of strings and numbers always serializes.
        let _ = serde_json::to_writer(&mut out, &c);
        out.extend_from_slice(b"\n\n");
        out
    }

    /// One content event of the client's stream, as llama-server writes it
    /// (keys in its order, `system_fingerprint` left out when there was
    /// none): a chat chunk
    /// `{"choices":[{"finish_reason":null,"index":I,"delta":{"content":TEXT}}],"created":C,"id":ID,"model":M,"system_fingerprint":F,"object":"chat.completion.chunk"}`
    /// or a text-completion chunk
    /// `{"choices":[{"text":TEXT,"index":I,"logprobs":null,"finish_reason":null}],"created":C,"model":M,"system_fingerprint":F,"object":"text_completion","id":ID}`;
    /// `logprobs` (the native event's `completion_probabilities`) goes in
    /// as `{"content": [...]}`.
    pub fn content_event(&self, text: &str, logprobs: Option<&Value>) -> Vec<u8> {
        let logprobs = logprobs.map(|content| Logprobs { content });
        self.event(self.choice(None, Some(text), logprobs), None)
    }

    /// The stream's end: the finish chunk (`"delta":{}`, or `"text":""`,
    /// and `finish_reason`), then, when `usage` is given, the usage chunk
    /// (chat: `"choices":[]` and `"usage"`; a text completion carries it in
    /// its finish chunk, as llama-server does), then `data: [DONE]`; each
    /// event ends with a blank line.
    pub fn finish_events(&self, finish_reason: &str, usage: Option<AnswerUsage>) -> Vec<u8> {
        let usage = usage.map(|u| Usage {
            completion_tokens: u.completion_tokens,
            prompt_tokens: u.prompt_tokens,
            total_tokens: u.prompt_tokens.saturating_add(u.completion_tokens),
        });
        let choices = self.choice(Some(finish_reason), None, None);
        let mut out = if self.text_completion {
            self.event(choices, usage)
        } else {
            let mut out = self.event(choices, None);
            if let Some(u) = usage {
                out.extend_from_slice(&self.event(Choices::Chat(Vec::new()), Some(u)));
            }
            out
        };
        out.extend_from_slice(b"data: [DONE]\n\n");
        out
    }

    /// This stream's one choice.
    fn choice<'a>(
        &self,
        finish_reason: Option<&'a str>,
        text: Option<&'a str>,
        logprobs: Option<Logprobs<'a>>,
    ) -> Choices<'a> {
        if self.text_completion {
            Choices::Text(vec![TextChoice {
                text: text.unwrap_or(""),
                index: self.index,
                logprobs,
                finish_reason,
            }])
        } else {
            Choices::Chat(vec![ChatChoice {
                finish_reason,
                index: self.index,
                delta: Delta { content: text },
                logprobs,
            }])
        }
    }
}

/// The OpenAI `finish_reason` for a native `stop_type`: `"limit"` is
/// `"length"`; `"eos"`, `"word"` and anything else are `"stop"`.
pub fn finish_reason(stop_type: Option<&str>) -> &'static str {
    match stop_type {
        Some("limit") => "length",
        _ => "stop",
    }
}

/// A native event of the continuation (its `data`) as the client's native
/// stream goes on: unchanged but for `tokens_predicted`, which counts the
/// `tokens_before` sent before the cut too. `data: <data>\n\n`.
pub fn native_event(data: &[u8], tokens_before: u64) -> Vec<u8> {
    const KEY: &[u8] = b"\"tokens_predicted\":";
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(b"data: ");
    match memchr::memmem::find(data, KEY) {
        Some(at) => {
            let start = at + KEY.len();
            let digits = data
                .get(start..)
                .map_or(0, |d| d.iter().take_while(|b| b.is_ascii_digit()).count());
            let n = std::str::from_utf8(data.get(start..start + digits).unwrap_or_default())
                .ok()
                .and_then(|d| d.parse::<u64>().ok());
            match n {
                Some(n) => {
                    out.extend_from_slice(data.get(..start).unwrap_or_default());
                    out.extend_from_slice(n.saturating_add(tokens_before).to_string().as_bytes());
                    out.extend_from_slice(data.get(start + digits..).unwrap_or_default());
                }
                None => out.extend_from_slice(data),
            }
        }
        None => out.extend_from_slice(data),
    }
    out.extend_from_slice(b"\n\n");
    out
}

/// The last event of a native stream whose every asked-for token was sent
/// before its own last event was lost: `stop` with `stop_type` `limit` and
/// the answer's `tokens_predicted`. `data: <event>\n\n`.
pub fn native_end(tokens_predicted: u64) -> Vec<u8> {
    format!(
        "data: {{\"index\":0,\"content\":\"\",\"stop\":true,\"stop_type\":\"limit\",\"tokens_predicted\":{tokens_predicted}}}\n\n"
    )
    .into_bytes()
}
