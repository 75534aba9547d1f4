//! Names of span attributes, span events and OTLP metrics: the wire contract
//! with trace and metric backends,
//! kept in one place because the GenAI conventions are still moving.
//!
//! Follows OpenTelemetry semantic conventions v1.37 (GenAI: Development
//! status). Names under `llama_cpp.` and `llamatap.` and the `first_token` /
//! `first_sentence` events are llamatap's own. Pure: constants only.

/// `gen_ai.operation.name`: `chat`, `text_completion`, `embeddings`.
pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
/// `gen_ai.provider.name`.
pub const GEN_AI_PROVIDER_NAME: &str = "gen_ai.provider.name";
/// The provider value for llama.cpp.
pub const PROVIDER_LLAMA_CPP: &str = "llama.cpp";
/// `gen_ai.request.model`.
pub const GEN_AI_REQUEST_MODEL: &str = "gen_ai.request.model";
/// `gen_ai.request.max_tokens`.
pub const GEN_AI_REQUEST_MAX_TOKENS: &str = "gen_ai.request.max_tokens";
/// `gen_ai.request.temperature`.
pub const GEN_AI_REQUEST_TEMPERATURE: &str = "gen_ai.request.temperature";
/// `gen_ai.request.top_p`.
pub const GEN_AI_REQUEST_TOP_P: &str = "gen_ai.request.top_p";
/// `gen_ai.request.seed`.
pub const GEN_AI_REQUEST_SEED: &str = "gen_ai.request.seed";
/// `gen_ai.request.stream`.
pub const GEN_AI_REQUEST_STREAM: &str = "gen_ai.request.stream";
/// `gen_ai.response.model`.
pub const GEN_AI_RESPONSE_MODEL: &str = "gen_ai.response.model";
/// `gen_ai.response.id`.
pub const GEN_AI_RESPONSE_ID: &str = "gen_ai.response.id";
/// `gen_ai.response.finish_reasons` (string array).
pub const GEN_AI_RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
/// `gen_ai.response.time_to_first_chunk`, seconds.
pub const GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: &str = "gen_ai.response.time_to_first_chunk";
/// `gen_ai.usage.input_tokens`: all prompt tokens, cached ones included.
pub const GEN_AI_USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
/// `gen_ai.usage.cache_read.input_tokens`.
pub const GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
/// `gen_ai.usage.output_tokens`.
pub const GEN_AI_USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// `gen_ai.usage.reasoning.output_tokens`.
pub const GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: &str = "gen_ai.usage.reasoning.output_tokens";

/// llama.cpp's `timings.prompt_n`: prompt tokens processed (not from cache).
pub const LLAMA_PROMPT_N: &str = "llama_cpp.timings.prompt_n";
/// llama.cpp's `timings.prompt_ms`.
pub const LLAMA_PROMPT_MS: &str = "llama_cpp.timings.prompt_ms";
/// llama.cpp's `timings.predicted_n`.
pub const LLAMA_PREDICTED_N: &str = "llama_cpp.timings.predicted_n";
/// llama.cpp's `timings.predicted_ms`.
pub const LLAMA_PREDICTED_MS: &str = "llama_cpp.timings.predicted_ms";
/// llama.cpp's `timings.cache_n`.
pub const LLAMA_CACHE_N: &str = "llama_cpp.timings.cache_n";

/// llamatap's own: route label.
pub const LLAMATAP_ROUTE: &str = "llamatap.route";
/// llamatap's own: outcome label.
pub const LLAMATAP_OUTCOME: &str = "llamatap.outcome";
/// llamatap's own: token-carrying events seen.
pub const LLAMATAP_TOKEN_EVENTS: &str = "llamatap.token_events";
/// llamatap's own: longest gap between tokens, seconds.
pub const LLAMATAP_MAX_TOKEN_GAP: &str = "llamatap.max_token_gap_s";
/// llamatap's own: events skipped for size.
pub const LLAMATAP_SKIPPED_EVENTS: &str = "llamatap.sse.skipped_events";

/// The tenant the request came from: a configured name or `anonymous`.
pub const LLAMATAP_TENANT: &str = "llamatap.tenant";

/// The upstream that answered: its configured name.
pub const LLAMATAP_UPSTREAM: &str = "llamatap.upstream";
/// The routing policy in force.
pub const LLAMATAP_ROUTE_POLICY: &str = "llamatap.route.policy";
/// Why the upstream was chosen.
pub const LLAMATAP_ROUTE_REASON: &str = "llamatap.route.reason";
/// Upstreams tried before the one that answered.
pub const LLAMATAP_ROUTE_FAILOVERS: &str = "llamatap.route.failovers";
/// Prompt tokens the router expected the upstream to hold in its cache.
pub const LLAMATAP_ROUTE_PREDICTED_CACHED_TOKENS: &str = "llamatap.route.predicted_cached_tokens";
/// The prediction against `cache_n`: confirmed, shortfall, unpredicted, cold.
pub const LLAMATAP_ROUTE_PREDICTION: &str = "llamatap.route.prediction";
/// The TTFT predicted before dispatch, milliseconds (int).
pub const LLAMATAP_TTFT_PREDICTED_MS: &str = "llamatap.ttft.predicted_ms";
/// The prediction's confidence: `high`, `low` or `none` (no data).
pub const LLAMATAP_TTFT_CONFIDENCE: &str = "llamatap.ttft.confidence";
/// The request's TTFT objective, milliseconds (int).
pub const LLAMATAP_TTFT_SLO_MS: &str = "llamatap.ttft.slo_ms";
/// The TTFT as corrected by the last prompt progress event, milliseconds
/// from dispatch (int).
pub const LLAMATAP_TTFT_CORRECTED_MS: &str = "llamatap.ttft.corrected_ms";
/// An answer of a less urgent class was told to pause so that this
/// request could meet its TTFT objective (bool; present only when so).
pub const LLAMATAP_TTFT_MADE_ROOM: &str = "llamatap.ttft.made_room";
/// Admitted as a probe though every member's bound was over its TTFT
/// objective: the member's bound was over it on its recent error alone,
/// and the member had taught no error for ten seconds (bool; present only
/// when so).
pub const LLAMATAP_TTFT_PROBE: &str = "llamatap.ttft.probe";
/// Refused because its TTFT objective was below every member's floor
/// (half the fastest decode step and least overhead each was seen to
/// take): the lowest floor, milliseconds (double; present only when so).
pub const LLAMATAP_TTFT_FLOOR_MS: &str = "llamatap.ttft.floor_ms";
/// How long the request waited before its dispatch so as not to push an
/// earlier answer's first token past that answer's TTFT objective,
/// milliseconds (int; present only when it waited).
pub const LLAMATAP_TTFT_HELD_MS: &str = "llamatap.ttft.held_ms";
/// How long the request waited before it was written upstream for the
/// prompts dispatched before it to its member to start, milliseconds (int;
/// present only when it waited).
pub const LLAMATAP_TTFT_SEQUENCED_MS: &str = "llamatap.ttft.sequenced_ms";
/// Prompt tokens of other answers that went through the batches of this
/// answer's prefill (int; present only when its prefill's interval is
/// known).
pub const LLAMATAP_TTFT_PREFILL_BESIDE_TOKENS: &str = "llamatap.ttft.prefill_beside_tokens";
/// The prediction's wait before the prompt's own prefill (for a slot, or
/// for the prompts other slots are prefilling), milliseconds (int).
pub const LLAMATAP_TTFT_PREDICTED_WAIT_MS: &str = "llamatap.ttft.predicted_wait_ms";
/// Dispatch to llama-server's first prompt progress event (its slot
/// started the prompt), milliseconds (int; present only with one).
pub const LLAMATAP_TTFT_SLOT_STARTED_MS: &str = "llamatap.ttft.slot_started_ms";
/// Prompt progress events read from the answer (int).
pub const LLAMATAP_TTFT_PROGRESS_EVENTS: &str = "llamatap.ttft.progress_events";

/// `http.request.method`.
pub const HTTP_REQUEST_METHOD: &str = "http.request.method";
/// `http.response.status_code`.
pub const HTTP_RESPONSE_STATUS_CODE: &str = "http.response.status_code";
/// `http.route`.
pub const HTTP_ROUTE: &str = "http.route";
/// `url.path`.
pub const URL_PATH: &str = "url.path";
/// `url.scheme`.
pub const URL_SCHEME: &str = "url.scheme";
/// `server.address`.
pub const SERVER_ADDRESS: &str = "server.address";
/// `server.port`.
pub const SERVER_PORT: &str = "server.port";
/// `client.address`.
pub const CLIENT_ADDRESS: &str = "client.address";
/// `error.type`.
pub const ERROR_TYPE: &str = "error.type";

/// The request's class in the admission queue: `interactive`, `default`, `batch`.
pub const LLAMATAP_PRIORITY: &str = "llamatap.priority";
/// What the request did with a resumable stream: `generate`, `replay`,
/// `stop`, `lookup`.
pub const LLAMATAP_CONVERSATION_USE: &str = "llamatap.conversation.use";
/// A replay's bytes sent to the client.
pub const LLAMATAP_CONVERSATION_REPLAYED_BYTES: &str = "llamatap.conversation.replayed_bytes";
/// Bytes of a generation read after its client hung up, sent to nobody.
pub const LLAMATAP_CONVERSATION_UNSENT_BYTES: &str = "llamatap.conversation.unsent_bytes";
/// A replay served from llamatap's copy of the answer (its member was gone).
pub const LLAMATAP_CONVERSATION_FROM_COPY: &str = "llamatap.conversation.from_copy";
/// Seconds the request waited in the admission queue.
pub const LLAMATAP_QUEUE_WAIT: &str = "llamatap.queue.wait";
/// Event: the admission queue dispatched the request (arrival to dispatch).
pub const EVENT_QUEUED: &str = "llamatap.queued";

/// Event: first non-empty visible content token.
pub const EVENT_FIRST_TOKEN: &str = "first_token";
/// Event: first token on any channel (reasoning, tool calls included), when earlier than `first_token`.
pub const EVENT_FIRST_TOKEN_ANY: &str = "first_token_any";
/// Event: first sentence of visible text complete.
pub const EVENT_FIRST_SENTENCE: &str = "first_sentence";
/// `first_sentence` attribute: trimmed length in Unicode characters.
pub const SENTENCE_CHARS: &str = "sentence.chars";
/// `first_sentence` attribute: the text (content capture only).
pub const SENTENCE_TEXT: &str = "sentence.text";
/// Event: upstream response headers received.
pub const EVENT_UPSTREAM_HEADERS: &str = "upstream_headers";
/// Event: last token.
pub const EVENT_LAST_TOKEN: &str = "last_token";
/// Event: the client hung up.
pub const EVENT_CLIENT_HANGUP: &str = "client_hangup";
/// `client_hangup` attribute: phase (`before_headers`, `prefill`, `decode`).
pub const HANGUP_PHASE: &str = "llamatap.hangup.phase";
/// Event: the upstream failed.
pub const EVENT_UPSTREAM_ERROR: &str = "upstream_error";
/// Error event attribute: message.
pub const ERROR_MESSAGE: &str = "error.message";

/// Why the turn recomputed its prompt: `reused`, `new_conversation`,
/// `system_changed`, `tools_changed`, `history_edited`, `history_truncated`,
/// `evicted`, `other_upstream`, `unknown`.
pub const LLAMATAP_CACHE_BREAK_CAUSE: &str = "llamatap.cache.break.cause";
/// Index of the first message that differs from the previous turn.
pub const LLAMATAP_CACHE_BREAK_MESSAGE_INDEX: &str = "llamatap.cache.break.message_index";
/// The field that differs: `system`, `tools`, `content`, `role`, `name`,
/// `tool_calls`, `message`, `other`.
pub const LLAMATAP_CACHE_BREAK_FIELD: &str = "llamatap.cache.break.field";
/// Characters into that field where it differs.
pub const LLAMATAP_CACHE_BREAK_OFFSET: &str = "llamatap.cache.break.offset";
/// Prompt tokens recomputed that the previous turn's prompt covered.
pub const LLAMATAP_CACHE_BREAK_RECOMPUTED_TOKENS: &str = "llamatap.cache.break.recomputed_tokens";
/// Prefill milliseconds those tokens took.
pub const LLAMATAP_CACHE_BREAK_RECOMPUTED_MS: &str = "llamatap.cache.break.recomputed_ms";
/// The previous turn's text at the break (content capture only).
pub const LLAMATAP_CACHE_BREAK_OLD_TEXT: &str = "llamatap.cache.break.old_text";
/// This turn's text at the break (content capture only).
pub const LLAMATAP_CACHE_BREAK_NEW_TEXT: &str = "llamatap.cache.break.new_text";
/// Event: the prompt stopped matching the KV cache before the previous
/// turn's end (every cause but `reused`, `new_conversation` and `unknown`).
pub const EVENT_CACHE_BREAK: &str = "cache_break";

/// Event: the answer was cut mid-stream (its upstream failed, drained, or
/// its slot was taken), and continued or not (see the attributes below).
pub const EVENT_CONTINUED: &str = "llamatap.continued";
/// Why: `upstream_died`, `stalled`, `drained`, `preempted`.
pub const LLAMATAP_CONTINUATION_REASON: &str = "llamatap.continuation.reason";
/// What became of it: `continued`, `not_continuable`, `failed`.
pub const LLAMATAP_CONTINUATION_RESULT: &str = "llamatap.continuation.result";
/// A fixed word saying why it was not continued or failed.
pub const LLAMATAP_CONTINUATION_WHY: &str = "llamatap.continuation.why";
/// The upstream the answer left.
pub const LLAMATAP_CONTINUATION_FROM: &str = "llamatap.continuation.from";
/// The upstream it went on from.
pub const LLAMATAP_CONTINUATION_TO: &str = "llamatap.continuation.to";
/// Token events the client had before the cut.
pub const LLAMATAP_CONTINUATION_TOKENS_BEFORE: &str = "llamatap.continuation.tokens_before";
/// Prompt tokens the target computed again (its `prompt_n`).
pub const LLAMATAP_CONTINUATION_REPREFILLED: &str = "llamatap.continuation.reprefilled_tokens";
/// Prompt tokens the target found in its KV cache (its `cache_n`).
pub const LLAMATAP_CONTINUATION_CACHED: &str = "llamatap.continuation.cached_tokens";
/// Tokens the target generated (its `predicted_n`).
pub const LLAMATAP_CONTINUATION_GENERATED: &str = "llamatap.continuation.generated_tokens";
/// From the cut to the continuation's first token, milliseconds.
pub const LLAMATAP_CONTINUATION_PAUSE_MS: &str = "llamatap.continuation.pause_ms";

// === OTLP metrics ===

/// The semantic-conventions release followed (span and metric names alike).
pub const SEMCONV_VERSION: &str = "1.37.0";
/// Its schema URL, on the exported metrics' scope and resource.
pub const SCHEMA_URL: &str = "https://opentelemetry.io/schemas/1.37.0";
/// Histogram, seconds: arrival to the end of the answer (or its failure).
pub const GEN_AI_SERVER_REQUEST_DURATION: &str = "gen_ai.server.request.duration";
/// Histogram, seconds: arrival to the first visible content token.
pub const GEN_AI_SERVER_TIME_TO_FIRST_TOKEN: &str = "gen_ai.server.time_to_first_token";
/// Histogram, seconds: time per output token after the first.
pub const GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN: &str = "gen_ai.server.time_per_output_token";
/// Histogram, tokens: input and output tokens per request.
pub const GEN_AI_CLIENT_TOKEN_USAGE: &str = "gen_ai.client.token.usage";
/// `gen_ai.token.type`: [`TOKEN_TYPE_INPUT`] or [`TOKEN_TYPE_OUTPUT`].
pub const GEN_AI_TOKEN_TYPE: &str = "gen_ai.token.type";
/// Input tokens (all prompt tokens, cached ones included).
pub const TOKEN_TYPE_INPUT: &str = "input";
/// Output tokens.
pub const TOKEN_TYPE_OUTPUT: &str = "output";
/// llamatap's own histogram, seconds: arrival to the first sentence's end.
pub const LLAMATAP_SERVER_TIME_TO_FIRST_SENTENCE: &str = "llamatap.server.time_to_first_sentence";
/// llamatap's own histogram, seconds: the wait in the admission queue.
pub const LLAMATAP_SERVER_QUEUE_DURATION: &str = "llamatap.server.queue.duration";
/// The attribute of the series that takes attribute sets beyond the cap.
pub const OTEL_METRIC_OVERFLOW: &str = "otel.metric.overflow";
/// `error.type` when the class is none of the known ones.
pub const ERROR_TYPE_OTHER: &str = "_OTHER";
/// UCUM seconds.
pub const UNIT_SECONDS: &str = "s";
/// Tokens (the conventions' annotation).
pub const UNIT_TOKENS: &str = "{token}";
