//! The finished facts of one proxied request: what the proxy hands to
//! telemetry (metrics, spans, the latency page) once the request is over.
//!
//! Plain data, no framework types. Durations are measured on the monotonic
//! clock from the request's arrival at the proxy.
//!
//! Every string a client or the upstream controls is cut to a documented
//! length ([`RequestRecord::bound`]) before telemetry sees it, so a queued
//! span or a latency-page entry has a bounded size whatever the traffic.

use std::time::{Duration, SystemTime};

use llamatap_wire::llama::{Timings, Usage};
use llamatap_wire::request::{RequestFacts, Route};
pub use llamatap_wire::text::{bounded, truncate, CUT_MARKER};

#[cfg(any(test, feature = "example"))]
mod example;
#[cfg(test)]
mod tests;

/// Longest request path kept (`url.path`), in bytes.
pub const MAX_PATH_BYTES: usize = 1024;
/// Longest method, response model, response id or finish reason kept, in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Longest error message kept, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 1024;
/// Most finish reasons kept (the first ones).
pub const MAX_FINISH_REASONS: usize = 16;
/// How a request ended. A fixed list: it is a metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Completed; the upstream answered 1xx-3xx.
    Ok,
    /// Completed with a 4xx refusal: llama-server's, or llamatap's own when
    /// no upstream serves the model named (`model_not_found`).
    ClientError,
    /// The client disconnected before the response was complete.
    ClientHangup,
    /// The upstream could not be reached, timed out, failed (5xx), died mid-stream,
    /// or sent an in-band error event.
    UpstreamError,
    /// llamatap itself failed.
    ProxyError,
    /// llamatap refused the request; the upstream never got it whole (API key, size limits).
    Rejected,
}

impl Outcome {
    /// Every outcome, in label order.
    pub const ALL: [Outcome; 6] = [
        Outcome::Ok,
        Outcome::ClientError,
        Outcome::ClientHangup,
        Outcome::UpstreamError,
        Outcome::ProxyError,
        Outcome::Rejected,
    ];

    /// The metric label value.
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ClientError => "client_error",
            Outcome::ClientHangup => "client_hangup",
            Outcome::UpstreamError => "upstream_error",
            Outcome::ProxyError => "proxy_error",
            Outcome::Rejected => "rejected",
        }
    }
}

/// Where in the request a client hang-up happened. A fixed list: it is a metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HangupPhase {
    /// Waiting in llamatap's admission queue: no upstream saw the request.
    Queued,
    /// Before the upstream's response headers (e.g. a non-streaming request still generating).
    BeforeHeaders,
    /// After the headers, before the first token: during the prompt prefill.
    Prefill,
    /// After the first token: during decoding.
    Decode,
}

impl HangupPhase {
    /// Every phase, in label order.
    pub const ALL: [HangupPhase; 4] = [
        HangupPhase::Queued,
        HangupPhase::BeforeHeaders,
        HangupPhase::Prefill,
        HangupPhase::Decode,
    ];

    /// The metric label value.
    pub fn as_str(&self) -> &'static str {
        match self {
            HangupPhase::Queued => "queued",
            HangupPhase::BeforeHeaders => "before_headers",
            HangupPhase::Prefill => "prefill",
            HangupPhase::Decode => "decode",
        }
    }
}

/// What a request did with a resumable stream (`X-Conversation-Id`,
/// `/v1/stream`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConversationFacts {
    /// A generation, a replay, a stop or a lookup.
    pub usage: llamatap_policy::conversation::Use,
    /// A replay: the buffered answer's bytes the client got (charged as
    /// nothing: they were generated, and charged, once).
    pub replayed_bytes: u64,
    /// A generation whose client hung up: the bytes llama-server went on
    /// generating that llamatap read and sent to nobody (they are in the
    /// record's counts and the tenant's charge).
    pub unsent_bytes: u64,
    /// A replay served from llamatap's copy of the answer (its member was
    /// gone).
    pub from_copy: bool,
}

/// Everything known about one finished request.
#[derive(Clone, Debug)]
pub struct RequestRecord {
    /// Route label.
    pub route: Route,
    /// HTTP method.
    pub method: String,
    /// Request path without the query string.
    pub path: String,
    /// Status sent to the client, if any.
    pub status: Option<u16>,
    /// How it ended.
    pub outcome: Outcome,
    /// Low-cardinality error class (`error.type`), when it failed.
    pub error_type: Option<&'static str>,
    /// Human-readable error, when it failed.
    pub error_message: Option<String>,
    /// Where the client hung up, if it did.
    pub hangup_phase: Option<HangupPhase>,
    /// Facts read from the request body.
    pub request: RequestFacts,
    /// The response was an event stream.
    pub streamed: bool,
    /// Wall-clock arrival time (for span timestamps).
    pub received_wall: SystemTime,
    /// Upstream response headers received.
    pub upstream_headers: Option<Duration>,
    /// First token on any channel (reasoning and tool calls included).
    pub first_token_any: Option<Duration>,
    /// First visible content token (TTFT).
    pub first_token: Option<Duration>,
    /// First sentence of visible text complete.
    pub first_sentence: Option<Duration>,
    /// Length of the trimmed first sentence, Unicode scalar values.
    pub sentence_chars: Option<usize>,
    /// The first sentence's text, only when content capture is on.
    pub sentence_text: Option<String>,
    /// Last token on any channel.
    pub last_token: Option<Duration>,
    /// Response complete (or failed).
    pub end: Duration,
    /// Model the upstream reported.
    pub response_model: Option<String>,
    /// Response id the upstream reported.
    pub response_id: Option<String>,
    /// Finish reasons, in order.
    pub finish_reasons: Vec<String>,
    /// llama-server's timings.
    pub timings: Option<Timings>,
    /// Usage object.
    pub usage: Option<Usage>,
    /// Events that carried a token.
    pub token_events: u64,
    /// Longest gap between two token-carrying events.
    pub max_token_gap: Option<Duration>,
    /// SSE events too large to parse (forwarded anyway).
    pub skipped_events: u64,
    /// Response body bytes forwarded.
    pub response_bytes: u64,
    /// Client and server addresses, for `client.address` and friends.
    pub client_address: Option<String>,
    /// Which upstream answered and why it was chosen; `None` when the
    /// request never reached the routing step (refused, or answered by
    /// llamatap itself).
    pub upstream: Option<UpstreamFacts>,
    /// The tenant's name (a configured name); `None`: the shared
    /// [`llamatap_policy::tenant::ANONYMOUS`].
    pub tenant: Option<std::sync::Arc<str>>,
    /// Why this chat turn recomputed its prompt (see [`llamatap_policy::cachebreak`]);
    /// `None` when not judged. Its excerpts are bounded (40 characters).
    pub cache_break: Option<llamatap_policy::cachebreak::Diagnosis>,
    /// The admission queue's facts; `None` when the queue is off or the
    /// route does not queue.
    pub queue: Option<QueueFacts>,
    /// What the request did with a resumable stream; `None` when it named
    /// none.
    pub conversation: Option<ConversationFacts>,
    /// The answer's continuations (at most
    /// [`crate::continuation::MAX_KEPT`]), each one cut mid-stream (its
    /// upstream failed or drained, or its slot was taken).
    pub continuations: Vec<crate::continuation::Continued>,
    /// The TTFT predicted before dispatch; `None` for a request that uses
    /// no slot, or one refused before its prediction.
    pub ttft: Option<TtftFacts>,
}

/// The TTFT predicted for a request before its dispatch, and its objective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TtftFacts {
    /// The prediction, whole milliseconds; `None`: the predictor had no
    /// data for the member and model.
    pub predicted_ms: Option<u64>,
    /// `high`, `low` or `none` (no data).
    pub confidence: &'static str,
    /// The request's TTFT objective, ms, when it had one.
    pub slo_ms: Option<u32>,
    /// Arrival to dispatch (the prediction's start); `None` when refused
    /// before dispatch.
    pub dispatched: Option<Duration>,
    /// The prediction as corrected by the answer's last prompt progress
    /// event (from dispatch), whole milliseconds; `None` when no progress
    /// event came or the predictor had no data.
    pub corrected_ms: Option<u64>,
    /// Prompt progress events read from the answer.
    pub progress_events: u32,
    /// No member was predicted within the objective until an answer of a
    /// less urgent class was told to pause to make room.
    pub made_room: bool,
    /// Admitted as a probe: every member's bound was over the objective on
    /// its recent error alone, and the member chosen had taught no ratio
    /// for ten seconds.
    pub probe: bool,
    /// Refused because its objective was below every member's floor (half
    /// the fastest decode step and least overhead each was seen to take):
    /// the lowest floor, whole microseconds. `None` for any other request.
    pub floor_us: Option<u64>,
    /// How long the request waited before its dispatch so as not to push
    /// an earlier answer's first token past that answer's objective, whole
    /// milliseconds; `None` when it did not wait.
    pub held_ms: Option<u64>,
    /// How long the request waited before it was written upstream for the
    /// prompts dispatched before it to its member to start, whole
    /// milliseconds; `None` when it did not wait.
    pub sequenced_ms: Option<u64>,
    /// Prompt tokens of other answers on the member that went through the
    /// batches of this answer's prefill (its first progress event to its
    /// first token; pro rata of each other prefill's interval); `None`
    /// when its prefill's interval is not known.
    pub prefill_beside_tokens: Option<u32>,
    /// The prediction's wait before the prompt's own prefill (for a slot
    /// to free, or for the prompts other slots are prefilling, whichever
    /// is longer), whole milliseconds; `None` without a prediction.
    pub predicted_wait_ms: Option<u64>,
    /// Dispatch to llama-server's first prompt progress event, sent as a
    /// slot starts the prompt (its own queue, the request's parsing and
    /// tokenizing), whole milliseconds; `None` without progress events.
    pub slot_started_ms: Option<u64>,
}

impl TtftFacts {
    /// The measured TTFT over the predicted one (the first token on any
    /// channel, from dispatch), when both are known and the prediction is
    /// above 0.
    pub fn ratio(&self, first_token_any: Option<Duration>) -> Option<f64> {
        let predicted = self.predicted_ms.filter(|ms| *ms > 0)? as f64;
        let actual = first_token_any?.checked_sub(self.dispatched?)?;
        Some(actual.as_secs_f64() * 1000.0 / predicted)
    }
}

/// A request's passage through the admission queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueFacts {
    /// Its class: `interactive`, `default` or `batch` (a metric label).
    pub class: &'static str,
    /// Arrival to dispatch (or to refusal or hang-up while queued).
    pub wait: Duration,
    /// It waited in the queue (no free slot at arrival).
    pub waited: bool,
}

/// The routing of one request: the upstream it went to and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamFacts {
    /// The upstream's configured name (a metric label).
    pub name: String,
    /// Its host, for `server.address`.
    pub host: String,
    /// Its port, for `server.port`.
    pub port: u16,
    /// The routing policy in force.
    pub policy: &'static str,
    /// Why this upstream was chosen (a metric label).
    pub reason: &'static str,
    /// Upstreams tried before this one (connect failures).
    pub failovers: u32,
    /// Prompt tokens the router expected this upstream to hold in its
    /// cache, when it could estimate them.
    pub predicted_cached_tokens: Option<u64>,
    /// What the answer's `cache_n` taught the router: `confirmed`,
    /// `shortfall`, `unpredicted` or `cold`; `None` when not measured.
    pub prediction: Option<&'static str>,
}

impl RequestRecord {
    /// Cuts every client- or upstream-controlled string to its bound:
    /// method, response model, response id and finish reasons to
    /// [`MAX_NAME_BYTES`] (at most [`MAX_FINISH_REASONS`] of them), the path
    /// to [`MAX_PATH_BYTES`], the error message to [`MAX_MESSAGE_BYTES`]. The
    /// request's model is bounded where it is read
    /// ([`llamatap_wire::request::MAX_MODEL_BYTES`]), the first sentence by the
    /// sentence rule.
    pub fn bound(&mut self) {
        truncate(&mut self.method, MAX_NAME_BYTES);
        truncate(&mut self.path, MAX_PATH_BYTES);
        for (s, max) in [
            (&mut self.error_message, MAX_MESSAGE_BYTES),
            (&mut self.response_model, MAX_NAME_BYTES),
            (&mut self.response_id, MAX_NAME_BYTES),
        ] {
            if let Some(s) = s {
                truncate(s, max);
            }
        }
        self.finish_reasons.truncate(MAX_FINISH_REASONS);
        for r in &mut self.finish_reasons {
            truncate(r, MAX_NAME_BYTES);
        }
    }

    /// All prompt tokens, cached included: `prompt_n + cache_n`, else usage.
    pub fn input_tokens(&self) -> Option<u64> {
        if let Some(t) = &self.timings {
            if let Some(p) = t.prompt_n {
                return Some(p.saturating_add(t.cache_n.unwrap_or(0)));
            }
        }
        self.usage.as_ref().and_then(|u| u.input_tokens)
    }

    /// Prompt tokens reused from the KV cache.
    pub fn cached_input_tokens(&self) -> Option<u64> {
        self.timings
            .as_ref()
            .and_then(|t| t.cache_n)
            .or_else(|| self.usage.as_ref().and_then(|u| u.cached_input_tokens))
    }

    /// Generated tokens: `predicted_n`, else usage.
    pub fn output_tokens(&self) -> Option<u64> {
        self.timings
            .as_ref()
            .and_then(|t| t.predicted_n)
            .or_else(|| self.usage.as_ref().and_then(|u| u.output_tokens))
    }

    /// (last token − first token on any channel) / (output tokens − 1).
    pub fn time_per_output_token(&self) -> Option<Duration> {
        let n = self.output_tokens()?;
        let (first, last) = (self.first_token_any?, self.last_token?);
        if n < 2 || last < first {
            return None;
        }
        Some((last - first) / u32::try_from(n - 1).unwrap_or(u32::MAX))
    }

    /// The whole answer arrived (outcome `ok`): only then are the stages of
    /// its end (last token, end, time per output token) an answer's timing.
    /// A request cut by a hang-up or a failure ended at the cut, which is
    /// no stage of an answer.
    pub fn answered(&self) -> bool {
        self.outcome == Outcome::Ok
    }

    /// The tenant label: a configured name or [`llamatap_policy::tenant::ANONYMOUS`].
    pub fn tenant(&self) -> &str {
        self.tenant
            .as_deref()
            .unwrap_or(llamatap_policy::tenant::ANONYMOUS)
    }

    /// The model to label with: the upstream's, else the request's.
    pub fn model(&self) -> Option<&str> {
        self.response_model
            .as_deref()
            .or(self.request.model.as_deref())
    }
}
