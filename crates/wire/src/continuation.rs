//! Continuing a chat-completions stream on another llama-server, as wire
//! formats: whether a request can be continued in meaning ([`plan`]), the
//! body of the continuation's native `POST /completion`
//! ([`Plan::completion_body`]), the `/apply-template` answer
//! ([`rendered_prompt`]), the ids of the client's stream ([`stream_ids`]),
//! and the chat chunks that re-wrap the continuation's native events
//! ([`StreamIds::content_event`], [`StreamIds::finish_events`]).
//!
//! Pure: no I/O. Deliberately not here: noticing a cut, choosing the
//! target, sending or reading anything, or parsing the native events (the
//! proxy's `continuation` module and [`crate::llama`] do those).
//!
//! A continuation from text: the prompt is the rendered conversation
//! followed by the text the client already has, tokenized again by the
//! target. Where the sampled tokens differ from the tokenizer's own split of
//! that text, the rest can differ from an uninterrupted run.

use serde::Serialize;
use serde_json::{Map, Value};

#[cfg(test)]
mod tests;

// === Refusal ===

/// Why a request cannot be continued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The body is not a JSON object.
    NotJson,
    /// `stream` is not `true`.
    NotStreaming,
    /// A non-empty `tools` array, or a `tool_choice` other than `"none"`:
    /// the answer may be a call, not text.
    Tools,
    /// A `grammar` constrains the answer.
    Grammar,
    /// A `json_schema` constrains the answer.
    JsonSchema,
    /// A `response_format` whose `type` is not `"text"`.
    ResponseFormat,
    /// `n` above 1.
    SeveralChoices,
    /// No `messages` (absent, not an array, or empty).
    NoMessages,
}

impl Refusal {
    /// A fixed word for telemetry: `not_json`, `not_streaming`, `tools`,
    /// `grammar`, `json_schema`, `response_format`, `several_choices`,
    /// `no_messages`.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::NotJson => "not_json",
            Refusal::NotStreaming => "not_streaming",
            Refusal::Tools => "tools",
            Refusal::Grammar => "grammar",
            Refusal::JsonSchema => "json_schema",
            Refusal::ResponseFormat => "response_format",
            Refusal::SeveralChoices => "several_choices",
            Refusal::NoMessages => "no_messages",
        }
    }
}

// === Plan ===

/// Top-level fields of a chat request carried into the continuation's
/// `/completion` as the client sent them: sampling, stop strings, and
/// `model` (a router-mode llama-server routes on it).
const CARRIED: [&str; 30] = [
    "model",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "typical_p",
    "seed",
    "stop",
    "ignore_eos",
    "presence_penalty",
    "frequency_penalty",
    "repeat_penalty",
    "repeat_last_n",
    "penalize_nl",
    "dry_multiplier",
    "dry_base",
    "dry_allowed_length",
    "dry_penalty_last_n",
    "dry_sequence_breakers",
    "xtc_probability",
    "xtc_threshold",
    "mirostat",
    "mirostat_tau",
    "mirostat_eta",
    "logit_bias",
    "samplers",
    "dynatemp_range",
    "dynatemp_exponent",
    "top_n_sigma",
    "n_probs",
];

/// What a continuable chat request keeps for its continuation.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The [`CARRIED`] fields the request set (not null).
    carried: Map<String, Value>,
    max_tokens: Option<u64>,
    include_usage: bool,
}

/// Reads a chat-completions request body. `Ok` when it is a JSON object
/// with `"stream": true` and a non-empty `messages` array, and no tools,
/// grammar, JSON schema, non-text response format or `n` above 1; the first
/// [`Refusal`] that applies otherwise, checked in the enum's order.
pub fn plan(body: &[u8]) -> Result<Plan, Refusal> {
    let Ok(Value::Object(req)) = serde_json::from_slice::<Value>(body) else {
        return Err(Refusal::NotJson);
    };
    let set = |k: &str| req.get(k).filter(|v| !v.is_null());
    if set("stream") != Some(&Value::Bool(true)) {
        return Err(Refusal::NotStreaming);
    }
    let tools = set("tools")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    let choice = set("tool_choice").is_some_and(|c| c.as_str() != Some("none"));
    if tools || choice {
        return Err(Refusal::Tools);
    }
    if set("grammar").is_some() {
        return Err(Refusal::Grammar);
    }
    if set("json_schema").is_some() {
        return Err(Refusal::JsonSchema);
    }
    if set("response_format").is_some_and(|f| f.get("type").and_then(Value::as_str) != Some("text"))
    {
        return Err(Refusal::ResponseFormat);
    }
    // llama-server reads `n` as an integer, 2.0 included.
    if set("n").and_then(Value::as_f64).is_some_and(|n| n > 1.0) {
        return Err(Refusal::SeveralChoices);
    }
    if set("messages")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        return Err(Refusal::NoMessages);
    }
    // As llama-server reads the limit: the first of these set, a negative
    // one meaning no limit.
    let max_tokens = ["n_predict", "max_completion_tokens", "max_tokens"]
        .iter()
        .find_map(|k| set(k))
        .and_then(Value::as_u64);
    let include_usage = set("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let carried = CARRIED
        .iter()
        .filter_map(|k| set(k).map(|v| ((*k).to_string(), v.clone())))
        .collect();
    Ok(Plan {
        carried,
        max_tokens,
        include_usage,
    })
}

impl Plan {
    /// The client's limit, as llama-server reads it: the first of
    /// `n_predict`, `max_completion_tokens` and `max_tokens` that is set
    /// (null ignored); `None` when none is, or it is negative: no limit.
    pub fn max_tokens(&self) -> Option<u64> {
        self.max_tokens
    }

    /// The client asked for the usage chunk (`stream_options.include_usage`
    /// was `true`).
    pub fn include_usage(&self) -> bool {
        self.include_usage
    }

    /// Tokens still to generate after `tokens_sent`: the limit less what was
    /// sent (`Some(0)` once it is reached), `None` without a limit.
    pub fn remaining(&self, tokens_sent: u64) -> Option<u64> {
        self.max_tokens.map(|m| m.saturating_sub(tokens_sent))
    }

    /// The continuation's `POST /completion` body, compact JSON: `prompt`
    /// is `rendered` followed by `sent_text`, `stream` and `cache_prompt`
    /// are true, `n_predict` is [`Plan::remaining`] (`-1`: no limit), and
    /// every carried field is the client's value, verbatim.
    pub fn completion_body(&self, rendered: &str, sent_text: &str, tokens_sent: u64) -> Vec<u8> {
        let mut body = self.carried.clone();
        let mut prompt = String::with_capacity(rendered.len() + sent_text.len());
        prompt.push_str(rendered);
        prompt.push_str(sent_text);
        body.insert("prompt".into(), Value::String(prompt));
        body.insert("stream".into(), Value::Bool(true));
        body.insert("cache_prompt".into(), Value::Bool(true));
        let n_predict = self
            .remaining(tokens_sent)
            .map_or(Value::from(-1), Value::from);
        body.insert("n_predict".into(), n_predict);
        // A map of JSON values always serializes.
        serde_json::to_vec(&Value::Object(body)).unwrap_or_default()
    }
}

/// The `prompt` string of an `/apply-template` answer (`{"prompt": "..."}`);
/// `None` when the answer is not a JSON object with a string `prompt`.
pub fn rendered_prompt(answer: &[u8]) -> Option<String> {
    match serde_json::from_slice::<Value>(answer).ok()? {
        Value::Object(mut o) => match o.remove("prompt")? {
            Value::String(s) => Some(s),
            _ => None,
        },
        _ => None,
    }
}

// === StreamIds ===

/// The identity of the client's stream, read from its first chat chunk.
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
}

/// Reads [`StreamIds`] from a chat chunk's data (an SSE event's `data`,
/// without `data: `); `None` unless it has a string `id`, an integer
/// `created` and a string `model`.
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
struct Choice<'a> {
    finish_reason: Option<&'a str>,
    index: u64,
    delta: Delta<'a>,
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

/// A chat chunk, fields in llama-server's order.
#[derive(Serialize)]
struct Chunk<'a> {
    choices: Vec<Choice<'a>>,
    created: i64,
    id: &'a str,
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_fingerprint: Option<&'a str>,
    object: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
}

impl StreamIds {
    /// One SSE event, `data: <chunk>\n\n`, with this stream's ids.
    fn event(&self, choices: Vec<Choice<'_>>, usage: Option<Usage>) -> Vec<u8> {
        let c = Chunk {
            choices,
            created: self.created,
            id: &self.id,
            model: &self.model,
            system_fingerprint: self.system_fingerprint.as_deref(),
            object: "chat.completion.chunk",
            usage,
        };
        let mut out = b"data: ".to_vec();
        // A struct of strings and numbers always serializes.
        let _ = serde_json::to_writer(&mut out, &c);
        out.extend_from_slice(b"\n\n");
        out
    }

    /// One content event of the client's stream:
    /// `data: {"choices":[{"finish_reason":null,"index":I,"delta":{"content":TEXT}}],"created":C,"id":ID,"model":M,"system_fingerprint":F,"object":"chat.completion.chunk"}`
    /// and a blank line, keys in llama-server's order, `system_fingerprint`
    /// left out when there was none.
    pub fn content_event(&self, text: &str) -> Vec<u8> {
        let delta = Delta {
            content: Some(text),
        };
        self.event(vec![self.choice(None, delta)], None)
    }

    /// The stream's end: the finish chunk (`"delta":{}` and
    /// `finish_reason`), then, when `usage` is given, the usage chunk
    /// (`"choices":[]`, `"usage":{"completion_tokens","prompt_tokens","total_tokens"}`),
    /// then `data: [DONE]`; each event ends with a blank line.
    pub fn finish_events(&self, finish_reason: &str, usage: Option<AnswerUsage>) -> Vec<u8> {
        let delta = Delta { content: None };
        let mut out = self.event(vec![self.choice(Some(finish_reason), delta)], None);
        if let Some(u) = usage {
            let usage = Usage {
                completion_tokens: u.completion_tokens,
                prompt_tokens: u.prompt_tokens,
                total_tokens: u.prompt_tokens.saturating_add(u.completion_tokens),
            };
            out.extend_from_slice(&self.event(Vec::new(), Some(usage)));
        }
        out.extend_from_slice(b"data: [DONE]\n\n");
        out
    }

    /// This stream's choice with `finish_reason` and `delta`.
    fn choice<'a>(&self, finish_reason: Option<&'a str>, delta: Delta<'a>) -> Choice<'a> {
        Choice {
            finish_reason,
            index: self.index,
            delta,
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
