//! The route table: every path llama-server serves, with the route's
//! metric label, GenAI operation name, answer format and whether it takes a
//! slot, all from one table ([`Route`]), matched against the path as
//! llama-server decodes it ([`super::path`]).
//!
//! Deliberately not here: the request body (the parent module) and anything
//! forwarded: the path goes upstream as the client wrote it.

use std::fmt;

use super::path;
use crate::llama::StreamFormat;

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
    /// `/`, `/index.html` and the web UI's static files: any other path
    /// whose last segment holds a dot and is not only dots (`/favicon.svg`,
    /// `/_app/immutable/bundle.….js`), which llama-server serves from its
    /// `--path` directory. No API route of llama-server has such a path.
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

    /// The exact paths llama-server serves this route at (none for
    /// [`Route::Other`]; `/slots/{id}` is matched apart).
    #[cfg(test)]
    pub(super) fn paths(self) -> &'static [&'static str] {
        self.info().paths
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
            None if is_static_file(path) => Route::Ui,
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

/// A decoded path that can only name a file of `llama-server --path`: its
/// last segment holds a dot and is not only dots (`.` and `..` are
/// directories). llama-server's API routes are all dotless; `/index.html`
/// is in the table.
fn is_static_file(path: &[u8]) -> bool {
    let last = memchr::memrchr(b'/', path).map_or(path, |at| &path[at + 1..]);
    last.contains(&b'.') && last.iter().any(|&b| b != b'.')
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
