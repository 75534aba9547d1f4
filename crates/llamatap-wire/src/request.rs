//! Request inspection: which llama-server route a path names (with the
//! route's label, GenAI operation and answer format, all from one table in
//! `request/route.rs`), and the facts a JSON request body states (model,
//! stream flag, sampling settings).
//!
//! It reads only; it never rejects, rewrites or validates a request for
//! llama-server (which answers bad requests itself), never fails and never
//! panics, whatever the bytes. It does not read headers, query strings or
//! nested fields; [`inspect_body_with_prompt`] also hands the prompt's
//! top-level fields, in the same pass, to a [`PromptReader`] (the one of
//! `llamatap_policy::cachebreak` hashes them as they are parsed).
//!
//! Decisions:
//! - [`Route::from_path`] reads the path as llama-server's HTTP library does
//!   (percent-decoded, [`path`]), then matches llama-server's own paths
//!   exactly, as its router does: `/v1/chat/%63ompletions` is
//!   [`Route::ChatCompletions`], while a trailing slash (`/v1/models/`),
//!   other casing or a prefix is [`Route::Other`], since llama-server
//!   answers 404 to it.
//! - A route that runs a task on a llama-server slot
//!   ([`Route::uses_slot`]) waits in the admission queue, whether or not it
//!   has a GenAI operation name: reranking, transcriptions and decisions
//!   do, tokenizing and template rendering do not.
//! - A route names the handler llama-server runs, so the label also tells
//!   the response format: `/completions` runs the native completion handler
//!   (like `/completion`, not the OpenAI one at `/v1/completions`), so it is
//!   [`Route::Completion`]; `/embeddings` is likewise [`Route::Embedding`].
//! - `/v1/messages/count_tokens` counts tokens and generates nothing: it is
//!   [`Route::Other`]. Ollama's `/api/chat` and `/api/tags`, which
//!   llama-server serves, are [`Route::ChatCompletions`] and [`Route::Models`].
//! - Reranking, transcriptions (`/v1/audio/transcriptions`, run as a chat
//!   completion on an audio model) and decisions (`/v1/systemone`) have no
//!   GenAI operation name, so none is reported.
//! - [`inspect_body`] keeps each field it can read: a wrongly typed field is
//!   `None` alone, a duplicated key takes its last value (as llama-server's
//!   JSON parser does), and a body cut short keeps the top-level fields
//!   completed before the cut, so a capped body still names its model; bytes
//!   after the object are not read, and a UTF-8 byte order mark is skipped.
//! - The token limit is the first non-negative integer among
//!   `max_completion_tokens`, `max_tokens`, `max_output_tokens`, `n_predict`
//!   (llama-server's chat handler prefers `max_completion_tokens` to
//!   `max_tokens`; a body normally carries only one).

pub mod admin;
mod lenient;
pub(crate) mod path;
pub mod query;
mod route;
#[cfg(test)]
mod tests;

use lenient::{Fields, Value};

pub use admin::AdminRoute;
pub use route::Route;

/// Longest model name kept, in bytes: longer names are `None`, since a model
/// name becomes a metric label and a span name.
pub const MAX_MODEL_BYTES: usize = 256;

/// Facts read from a JSON request body; any missing/invalid field is None; a
/// body that is not JSON gives all None (never an error).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestFacts {
    /// `model`: a non-empty string of at most [`MAX_MODEL_BYTES`] bytes.
    pub model: Option<String>,
    /// `stream`: a boolean.
    pub stream: Option<bool>,
    /// The first non-negative integer of `max_completion_tokens`,
    /// `max_tokens` (OpenAI, Anthropic), `max_output_tokens` (Responses) and
    /// `n_predict` (native; its `-1`, unlimited, is `None`).
    pub max_tokens: Option<u64>,
    /// `temperature`: a number.
    pub temperature: Option<f64>,
    /// `top_p`: a number.
    pub top_p: Option<f64>,
    /// `seed`: an integer that fits in `i64`.
    pub seed: Option<i64>,
    /// `response_fields` (native routes) filters llama-server's final answer
    /// down to fields that carry no token count: neither `timings` nor both
    /// `tokens_predicted` and `tokens_evaluated` are listed. llama-server
    /// filters only with a non-empty list of strings (anything else is its
    /// default, the empty list).
    pub hides_counts: bool,
    /// `return_progress` is `true` (its last value, as llama-server reads
    /// it): the client asked for llama-server's prompt progress events.
    pub return_progress: bool,
}

/// Reads the top-level fields of a JSON object body; see [`RequestFacts`].
pub fn inspect_body(body: &[u8]) -> RequestFacts {
    facts(Fields::read(body))
}

/// A top-level field of a chat prompt, handed whole to a [`PromptReader`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PromptField {
    /// `messages`: OpenAI chat, Anthropic Messages.
    Messages,
    /// `tools`.
    Tools,
    /// `system`: Anthropic's system prompt.
    System,
    /// `instructions`: the Responses API's system prompt.
    Instructions,
    /// `input`: the Responses API's items.
    Input,
}

impl PromptField {
    /// Every field, in the order a prompt is compared.
    pub const ALL: [PromptField; 5] = [
        PromptField::System,
        PromptField::Instructions,
        PromptField::Messages,
        PromptField::Input,
        PromptField::Tools,
    ];

    /// The JSON key.
    pub fn as_str(self) -> &'static str {
        match self {
            PromptField::Messages => "messages",
            PromptField::Tools => "tools",
            PromptField::System => "system",
            PromptField::Instructions => "instructions",
            PromptField::Input => "input",
        }
    }
}

/// Reads a chat prompt's top-level fields while [`inspect_body_with_prompt`]
/// parses the body, so that the prompt is read in the same single pass and
/// never has to be kept as a tree.
pub trait PromptReader {
    /// Reads the whole value of `field` from `value` (a deserializer for
    /// that value alone). A field named twice is read twice, in body order,
    /// and the last read should count; an error (the bytes are not JSON
    /// there) ends the parse, and the field read then should not count.
    fn read<'de, D: serde::Deserializer<'de>>(
        &mut self,
        field: PromptField,
        value: D,
    ) -> Result<(), D::Error>;
}

/// As [`inspect_body`], in the same single parse also handing each of the
/// prompt's fields ([`PromptField`]) to `reader`.
pub fn inspect_body_with_prompt<R: PromptReader>(body: &[u8], reader: &mut R) -> RequestFacts {
    facts(Fields::read_with(body, reader))
}

/// As [`inspect_body`], in the same single parse also returning the
/// prompt's fields (`messages`, `tools`, `system`, `instructions`, `input`,
/// each whole when present) with the `model` string, as a JSON object: the
/// body that `llamatap_policy::cachebreak::PromptDigest::from_json` reads, built
/// as a tree (the proxy reads the prompt with a [`PromptReader`] instead).
pub fn inspect_body_and_prompt(body: &[u8]) -> (RequestFacts, serde_json::Value) {
    let mut prompt = lenient::Collect::default();
    let facts = inspect_body_with_prompt(body, &mut prompt);
    let mut prompt = prompt.0;
    if let Some(model) = &facts.model {
        prompt.insert("model".to_string(), serde_json::Value::from(model.as_str()));
    }
    (facts, serde_json::Value::Object(prompt))
}

fn facts(fields: Fields) -> RequestFacts {
    let [max_completion_tokens, max_tokens, max_output_tokens, n_predict] = [
        fields.max_completion_tokens,
        fields.max_tokens,
        fields.max_output_tokens,
        fields.n_predict,
    ]
    .map(|value| value.and_then(Value::into_u64));
    RequestFacts {
        model: match fields.model {
            Some(Value::Str(model)) if !model.is_empty() => Some(model),
            _ => None,
        },
        stream: match fields.stream {
            Some(Value::Bool(stream)) => Some(stream),
            _ => None,
        },
        max_tokens: max_completion_tokens
            .or(max_tokens)
            .or(max_output_tokens)
            .or(n_predict),
        temperature: fields.temperature.and_then(Value::into_f64),
        top_p: fields.top_p.and_then(Value::into_f64),
        seed: fields.seed.and_then(Value::into_i64),
        hides_counts: fields
            .response_fields
            .is_some_and(|k| k.filters && !k.timings && !(k.predicted && k.evaluated)),
        return_progress: matches!(fields.return_progress, Some(Value::Bool(true))),
    }
}
