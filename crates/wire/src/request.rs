//! Request inspection: which llama-server route a path names (with the
//! route's label, GenAI operation and answer format, all from one table), and
//! the facts a JSON request body states (model, stream flag, sampling
//! settings).
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

mod lenient;
mod path;
#[cfg(test)]
mod tests;

use lenient::{Fields, Value};
use std::fmt;

use crate::llama::StreamFormat;

/// Longest model name kept, in bytes: longer names are `None`, since a model
/// name becomes a metric label and a span name.
pub const MAX_MODEL_BYTES: usize = 256;

/// Fixed list of routes (low-cardinality metric label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Route {
    /// `/v1/chat/completions`, `/chat/completions`, `/api/chat`: OpenAI chat.
    ChatCompletions,
    /// `/v1/completions`: OpenAI text completion.
    Completions,
    /// `/v1/embeddings`: OpenAI embeddings.
    Embeddings,
    /// `/v1/models`, `/models`, `/api/tags`.
    Models,
    /// `/completion`, `/completions`: llama-server's native completion.
    Completion,
    /// `/infill`: code infill.
    Infill,
    /// `/tokenize`.
    Tokenize,
    /// `/detokenize`.
    Detokenize,
    /// `/apply-template`.
    ApplyTemplate,
    /// `/embedding`, `/embeddings`: llama-server's native embeddings.
    Embedding,
    /// `/rerank`, `/reranking`, `/v1/rerank`, `/v1/reranking`.
    Reranking,
    /// `/v1/audio/transcriptions`, `/audio/transcriptions`: OpenAI
    /// transcription (a chat completion on an audio model).
    Transcriptions,
    /// `/v1/systemone`: a decision model's answers.
    Decision,
    /// `/health`, `/v1/health`.
    Health,
    /// `/props`.
    Props,
    /// `/slots`, `/slots/<id>` (and `/slots/<id>/`, `/slots/`, which
    /// llama-server's router also matches).
    Slots,
    /// `/metrics`: llama-server's own Prometheus metrics.
    Metrics,
    /// `/v1/messages`: Anthropic Messages.
    Messages,
    /// `/v1/responses`, `/responses`: OpenAI Responses.
    Responses,
    /// `/`, `/index.html`: the web UI.
    Ui,
    /// Any other path.
    Other,
}

const ROUTES: &[Route] = &[
    Route::ChatCompletions,
    Route::Completions,
    Route::Embeddings,
    Route::Models,
    Route::Completion,
    Route::Infill,
    Route::Tokenize,
    Route::Detokenize,
    Route::ApplyTemplate,
    Route::Embedding,
    Route::Reranking,
    Route::Transcriptions,
    Route::Decision,
    Route::Health,
    Route::Props,
    Route::Slots,
    Route::Metrics,
    Route::Messages,
    Route::Responses,
    Route::Ui,
    Route::Other,
];

/// One row of the route table: everything llamatap knows about a route.
struct RouteInfo {
    /// The metric label: snake_case.
    label: &'static str,
    /// The exact paths llama-server serves it at.
    paths: &'static [&'static str],
    /// OTel GenAI operation name, for routes that generate or embed.
    operation: Option<&'static str>,
    /// Format of its streamed (and whole) LLM answers.
    format: Option<StreamFormat>,
    /// It runs a task on a llama-server slot (so it waits in the queue).
    slot: bool,
}

/// A row of the route table. Every route with an operation name runs on a
/// slot.
const fn row(
    label: &'static str,
    paths: &'static [&'static str],
    operation: Option<&'static str>,
    format: Option<StreamFormat>,
) -> RouteInfo {
    RouteInfo {
        label,
        paths,
        operation,
        format,
        slot: operation.is_some(),
    }
}

/// A row of a route that runs on a slot with no GenAI operation name.
const fn slot_row(label: &'static str, paths: &'static [&'static str]) -> RouteInfo {
    RouteInfo {
        label,
        paths,
        operation: None,
        format: None,
        slot: true,
    }
}

const CHAT: Option<&str> = Some("chat");
const TEXT_COMPLETION: Option<&str> = Some("text_completion");
const EMBEDDINGS: Option<&str> = Some("embeddings");

impl Route {
    /// The route table, one row per route: the only place that maps paths,
    /// labels, operation names and stream formats.
    fn info(self) -> RouteInfo {
        use StreamFormat::{
            AnthropicMessages, Native, OpenAiChat, OpenAiCompletion, OpenAiResponses,
        };
        match self {
            Route::ChatCompletions => row(
                "chat_completions",
                &["/v1/chat/completions", "/chat/completions", "/api/chat"],
                CHAT,
                Some(OpenAiChat),
            ),
            Route::Completions => row(
                "completions",
                &["/v1/completions"],
                TEXT_COMPLETION,
                Some(OpenAiCompletion),
            ),
            Route::Embeddings => row("embeddings", &["/v1/embeddings"], EMBEDDINGS, None),
            Route::Models => row(
                "models",
                &["/v1/models", "/models", "/api/tags"],
                None,
                None,
            ),
            Route::Completion => row(
                "completion",
                &["/completion", "/completions"],
                TEXT_COMPLETION,
                Some(Native),
            ),
            Route::Infill => row("infill", &["/infill"], TEXT_COMPLETION, Some(Native)),
            Route::Tokenize => row("tokenize", &["/tokenize"], None, None),
            Route::Detokenize => row("detokenize", &["/detokenize"], None, None),
            Route::ApplyTemplate => row("apply_template", &["/apply-template"], None, None),
            Route::Embedding => row(
                "embedding",
                &["/embedding", "/embeddings"],
                EMBEDDINGS,
                None,
            ),
            Route::Reranking => slot_row(
                "reranking",
                &["/rerank", "/reranking", "/v1/rerank", "/v1/reranking"],
            ),
            Route::Transcriptions => slot_row(
                "transcriptions",
                &["/v1/audio/transcriptions", "/audio/transcriptions"],
            ),
            Route::Decision => slot_row("decision", &["/v1/systemone"]),
            Route::Health => row("health", &["/health", "/v1/health"], None, None),
            Route::Props => row("props", &["/props"], None, None),
            // Also `/slots/<id>`, matched in `from_path`.
            Route::Slots => row("slots", &["/slots"], None, None),
            Route::Metrics => row("metrics", &["/metrics"], None, None),
            Route::Messages => row("messages", &["/v1/messages"], CHAT, Some(AnthropicMessages)),
            Route::Responses => row(
                "responses",
                &["/v1/responses", "/responses"],
                CHAT,
                Some(OpenAiResponses),
            ),
            Route::Ui => row("ui", &["/", "/index.html"], None, None),
            Route::Other => row("other", &[], None, None),
        }
    }

    /// The route of a request target: its path (anything from `?` or `#`
    /// on is ignored), percent-decoded as llama-server decodes it
    /// ([`path::decoded`]), matched exactly.
    pub fn from_path(target: &str) -> Route {
        Route::from_target(target.as_bytes())
    }

    /// [`Route::from_path`] of the request target's bytes as they go on the
    /// wire (Pingora's `raw_path`): whatever its form, since llama-server
    /// decodes even a target that does not start with `/`
    /// (`%2Fv1%2Fchat%2Fcompletions` is a chat), while `http::Uri` roots
    /// such a target at `/`.
    pub fn from_target(target: &[u8]) -> Route {
        let path = path::decoded(target);
        let path = path.as_ref();
        if let Some(route) = ROUTES
            .iter()
            .find(|r| r.info().paths.iter().any(|p| p.as_bytes() == path))
        {
            return *route;
        }
        // llama-server's `/slots/:id_slot`: one segment, then at most a `/`.
        match path.strip_prefix(b"/slots/") {
            Some(id) => match memchr::memchr(b'/', id) {
                None => Route::Slots,
                Some(at) if at + 1 == id.len() => Route::Slots,
                Some(_) => Route::Other,
            },
            None => Route::Other,
        }
    }

    /// The metric label: snake_case, e.g. `chat_completions`.
    pub fn as_str(&self) -> &'static str {
        self.info().label
    }

    /// Every route, in declaration order (to pre-register metric labels).
    pub fn all() -> &'static [Route] {
        ROUTES
    }

    /// OTel GenAI operation name: `chat` (chat completions, messages,
    /// responses), `text_completion` (completions, completion, infill),
    /// `embeddings` (embeddings, embedding); `None` for other routes,
    /// reranking included.
    pub fn operation_name(&self) -> Option<&'static str> {
        self.info().operation
    }

    /// It runs a task on a llama-server slot: it generates, embeds, reranks,
    /// transcribes or decides. Such a request waits in the admission queue.
    pub fn uses_slot(&self) -> bool {
        self.info().slot
    }

    /// The format of the route's LLM answers, streamed or whole; `None` for
    /// routes that do not generate text.
    pub fn stream_format(&self) -> Option<StreamFormat> {
        self.info().format
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

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
    }
}
