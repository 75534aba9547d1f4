//! Continuing a stream on another llama-server (or later), as wire
//! formats: whether a request can be continued in meaning ([`plan`], for
//! the three shapes of [`Shape`]), the body of the continuation's native
//! `POST /completion` ([`Plan::completion_body`]), the `/apply-template`
//! answer ([`rendered_prompt`]), the ids of the client's stream
//! ([`stream_ids`]), the token ids each of its events carried
//! ([`event_token_ids`]), and the events that re-wrap the continuation's
//! native events into the client's format (`rewrap.rs`), the next attempt
//! at a cut answer ([`next()`]) and the transformer that rewrites a
//! continuation's stream into the client's ([`Rewriter`]).
//!
//! Pure: no I/O. Deliberately not here: noticing a cut, choosing the
//! target, sending or reading anything, or parsing the native events (the
//! proxy's `continuation` module and [`crate::llama`] do those).
//!
//! Token-exact where the client's stream carried token ids (a chat or
//! completions request with `logprobs`, and every native stream): the
//! prompt is the conversation followed by those ids, exactly what the cut
//! llama-server had. Otherwise from text: the conversation followed by the
//! text the client already has, tokenized again by the target; where the
//! sampled tokens differ from the tokenizer's own split of that text, the
//! rest can differ from an uninterrupted run.

use serde_json::{Map, Value};

mod ids;
mod next;
mod rest;
mod rewrap;
#[cfg(test)]
mod tests;

pub use ids::event_token_ids;
pub use next::{next, Heard, Next, Rest};
pub use rest::{Rewriter, Target, TargetCounts};
pub use rewrap::{finish_reason, native_end, native_event, stream_ids, AnswerUsage, StreamIds};

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
    /// A completion request without one prompt llamatap can extend (absent,
    /// empty, or not a string or an array of strings and token ids).
    NoPrompt,
}

impl Refusal {
    /// A fixed word for telemetry: `not_json`, `not_streaming`, `tools`,
    /// `grammar`, `json_schema`, `response_format`, `several_choices`,
    /// `no_messages`, `no_prompt`.
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
            Refusal::NoPrompt => "no_prompt",
        }
    }
}

// === Plan ===

/// Top-level fields of a request carried into the continuation's
/// `/completion` as the client sent them: everything the pinned
/// llama-server reads (its `server-schema.cpp`) that changes what is
/// generated or how its events look: sampling, stop strings, adapters,
/// limits of time and indentation, the shape of probabilities and timings,
/// and `model` (a router-mode llama-server routes on it).
const CARRIED: [&str; 41] = [
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
    "adaptive_target",
    "adaptive_decay",
    "min_keep",
    "backend_sampling",
    "post_sampling_probs",
    "lora",
    "t_max_predict_ms",
    "n_indent",
    "n_keep",
    "n_discard",
    "timings_per_token",
];

/// An integer field as llama-server reads it (`json::get<int>`): a number,
/// a fraction truncated toward zero (`20.0` and `20.7` are 20); `None` when
/// absent, null, or not a number.
fn integer(v: Option<&Value>) -> Option<i64> {
    let v = v?;
    if let Some(i) = v.as_i64() {
        return Some(i);
    }
    v.as_f64().filter(|f| f.is_finite()).map(|f| {
        // Saturating, as a value beyond the range is refused upstream anyway.
        f.trunc().clamp(i64::MIN as f64, i64::MAX as f64) as i64
    })
}

/// The first of `names` that is set (not null), as llama-server picks a
/// field among its aliases.
fn first_set<'a>(req: &'a Map<String, Value>, names: &[&str]) -> Option<&'a Value> {
    names
        .iter()
        .find_map(|k| req.get(*k).filter(|v| !v.is_null()))
}

/// The request's route, as the continuation sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// `/v1/chat/completions`: the conversation is rendered by the target's
    /// `/apply-template`; chat chunks.
    Chat,
    /// `/v1/completions`: the request's `prompt`; text-completion chunks.
    Completions,
    /// `/completion`: the request's `prompt`; native events.
    Native,
}

/// What a continuable request keeps for its continuation.
#[derive(Clone, Debug)]
pub struct Plan {
    shape: Shape,
    /// The [`CARRIED`] fields the request set (not null).
    carried: Map<String, Value>,
    max_tokens: Option<u64>,
    include_usage: bool,
    /// The request's prompt (completions and native only): a string, or an
    /// array of token ids and strings holding at least one id.
    prompt: Option<Value>,
    /// `n_probs` the continuation asks for, from the request's `logprobs`.
    n_probs: Option<u64>,
}

/// What the client already has of the answer.
#[derive(Clone, Copy, Debug)]
pub struct Sent<'a> {
    /// Its visible text.
    pub text: &'a str,
    /// The token ids of that text, when every event carried them.
    pub ids: Option<&'a [u32]>,
    /// How many tokens that is (the ids' count when known).
    pub tokens: u64,
}

/// Reads a chat-completions request body ([`plan_for`] of [`Shape::Chat`]).
pub fn plan(body: &[u8]) -> Result<Plan, Refusal> {
    plan_for(Shape::Chat, body)
}

/// Reads a request body of `shape`. `Ok` when it is a JSON object with
/// `"stream": true`, no tools, grammar, JSON schema, non-text response
/// format or `n` above 1, and a non-empty `messages` array (chat) or one
/// prompt (completions, native); the first [`Refusal`] that applies
/// otherwise, checked in the enum's order.
pub fn plan_for(shape: Shape, body: &[u8]) -> Result<Plan, Refusal> {
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
    // llama-server reads `n_cmpl`, or its alias `n`, as an integer (2.0
    // included).
    if integer(first_set(&req, &["n_cmpl", "n"])).is_some_and(|n| n > 1) {
        return Err(Refusal::SeveralChoices);
    }
    let prompt = match shape {
        Shape::Chat => {
            if set("messages")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty)
            {
                return Err(Refusal::NoMessages);
            }
            None
        }
        Shape::Completions | Shape::Native => Some(one_prompt(set("prompt"))?),
    };
    // llama-server's own reading: a chat request's `logprobs: true` asks
    // for `top_logprobs` (default 20) alternatives; a completions
    // request's `logprobs` is that number; a native one sets `n_probs`
    // (carried as it is).
    let n_probs = match shape {
        Shape::Chat => (set("logprobs") == Some(&Value::Bool(true)))
            .then(|| set("top_logprobs").and_then(Value::as_u64).unwrap_or(20)),
        Shape::Completions => set("logprobs").and_then(Value::as_u64).filter(|n| *n > 0),
        // `n_probs` is carried; its alias `logprobs` is read the same way.
        Shape::Native if set("n_probs").is_none() => integer(set("logprobs"))
            .and_then(|n| u64::try_from(n).ok())
            .filter(|n| *n > 0),
        Shape::Native => None,
    };
    // As llama-server reads the limit: the first of these set, as an
    // integer (a fraction truncated), a negative one meaning no limit.
    let max_tokens = integer(first_set(
        &req,
        &["n_predict", "max_completion_tokens", "max_tokens"],
    ))
    .and_then(|n| u64::try_from(n).ok());
    let include_usage = set("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let carried = CARRIED
        .iter()
        .filter_map(|k| set(k).map(|v| ((*k).to_string(), v.clone())))
        .collect();
    Ok(Plan {
        shape,
        carried,
        max_tokens,
        include_usage,
        prompt,
        n_probs,
    })
}

/// The one prompt of a completion request, as llama-server reads it: a
/// string, or an array of token ids and strings holding at least one id (an
/// array of strings alone is several prompts, unless it holds one).
fn one_prompt(p: Option<&Value>) -> Result<Value, Refusal> {
    match p {
        Some(Value::String(s)) if !s.is_empty() => Ok(Value::String(s.clone())),
        Some(Value::Array(a)) => {
            let id = |v: &Value| v.as_u64().is_some_and(|n| n <= u64::from(u32::MAX));
            if a.iter().any(|v| !(id(v) || v.is_string())) {
                // Nested arrays or objects: several prompts, or multimodal.
                return Err(Refusal::SeveralChoices);
            }
            match a.as_slice() {
                [] => Err(Refusal::NoPrompt),
                [Value::String(s)] if !s.is_empty() => Ok(Value::String(s.clone())),
                _ if a.iter().any(id) => Ok(Value::Array(a.clone())),
                [_] => Err(Refusal::NoPrompt),
                _ => Err(Refusal::SeveralChoices),
            }
        }
        _ => Err(Refusal::NoPrompt),
    }
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

    /// Its shape.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The conversation must be rendered by the target's `/apply-template`
    /// first (chat).
    pub fn needs_template(&self) -> bool {
        self.shape == Shape::Chat
    }

    /// The continuation asks for token alternatives (`n_probs`), so its
    /// events carry `logprobs` for the client.
    pub fn wants_logprobs(&self) -> bool {
        self.n_probs.is_some()
    }

    /// The continuation's `POST /completion` body, compact JSON. `prompt` is
    /// the conversation (`rendered` for chat, the request's prompt
    /// otherwise) followed by what was sent: its token ids when known (a
    /// mixed array, exactly what the cut llama-server had), else its text
    /// (joined to a string prompt, or one more string of an array that
    /// holds ids). `stream` and `cache_prompt` are true, `n_predict` is
    /// [`Plan::remaining`] (`-1`: no limit), `n_probs` follows the request's
    /// `logprobs`, and every carried field is the client's value, verbatim.
    pub fn completion_body(&self, rendered: Option<&str>, sent: &Sent<'_>) -> Vec<u8> {
        let mut body = self.carried.clone();
        let base = match (rendered, &self.prompt) {
            (Some(r), _) => Value::String(r.to_string()),
            (None, Some(p)) => p.clone(),
            (None, None) => Value::String(String::new()),
        };
        let prompt = match (base, sent.ids) {
            (Value::String(s), Some(ids)) => {
                let mut a = Vec::with_capacity(ids.len() + 1);
                a.push(Value::String(s));
                a.extend(ids.iter().map(|i| Value::from(*i)));
                Value::Array(a)
            }
            (Value::Array(mut a), Some(ids)) => {
                a.extend(ids.iter().map(|i| Value::from(*i)));
                Value::Array(a)
            }
            (Value::String(mut s), None) => {
                s.push_str(sent.text);
                Value::String(s)
            }
            (Value::Array(mut a), None) => {
                if !sent.text.is_empty() {
                    a.push(Value::String(sent.text.to_string()));
                }
                Value::Array(a)
            }
            (other, _) => other,
        };
        body.insert("prompt".into(), prompt);
        body.insert("stream".into(), Value::Bool(true));
        body.insert("cache_prompt".into(), Value::Bool(true));
        if let Some(n) = self.n_probs {
            body.insert("n_probs".into(), Value::from(n));
        }
        let n_predict = self
            .remaining(sent.tokens)
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
