//! Per-request state: what the hooks learn as the request passes, kept as
//! plain fields until `logging` turns it into a [`RequestRecord`].

use std::time::{Instant, SystemTime};

use llamatap_policy::conversation::Use;
use llamatap_policy::router::{Chain, Decision};
use llamatap_telemetry::continuation::Continued;
use llamatap_telemetry::observe::{StreamEnd, StreamFacts, StreamObserver};
use llamatap_telemetry::record::{
    ConversationFacts, HangupPhase, Outcome, QueueFacts, RequestRecord,
};
use llamatap_telemetry::spans::RequestSpan;
use llamatap_wire::llama::StreamFormat;
use llamatap_wire::request::{RequestFacts, Route};

/// State of one proxied request: plain data, grouped by what it is.
pub struct RequestCtx {
    /// What the client asked.
    pub asked: Asked,
    /// Who asks: the tenant and what it was admitted with.
    pub who: Who,
    /// The admission queue's state and the slot it granted (queue on).
    pub admission: Option<Box<crate::admission::Held>>,
    /// The current attempt's upstream.
    pub attempt: AttemptState,
    /// What was seen of the answer and sent of it: the observation.
    pub seen: Seen,
    /// What a chat stream keeps to be continued elsewhere, and its
    /// continuations (`[continuation]` on).
    pub resume: Option<Box<Resume>>,
    /// The resumable stream the request names, and its holder
    /// ([`crate::conversations`]).
    pub conversation: Option<Box<llamatap_policy::conversation::Claim>>,
}

/// What the client asked: its arrival, its route and body, and the facts
/// read from them.
pub struct Asked {
    /// Monotonic arrival.
    pub received: Instant,
    /// Wall-clock arrival.
    pub received_wall: SystemTime,
    /// Route label.
    pub route: Route,
    /// Bounded request body prefix, for model and parameters.
    pub body: Vec<u8>,
    /// The body outgrew the inspection limit.
    pub body_truncated: bool,
    /// Facts read from the body.
    pub request: RequestFacts,
    /// Request body bytes received.
    pub request_bytes: u64,
    /// llamatap answered the client's `Expect: 100-continue` itself.
    pub continue_sent: bool,
    /// `request_filter` ran (telemetry counted the request).
    pub started: bool,
}

/// Who asks: the tenant, its admitted limits, its session.
#[derive(Default)]
pub struct Who {
    /// Who the request is from (set by the key check).
    pub tenant: llamatap_policy::tenant::TenantId,
    /// The tenant's concurrency slot, while held (given back on drop).
    pub slot: Option<llamatap_policy::tenant::InFlight>,
    /// The tenant's per-minute limits as admitted: the `x-ratelimit-*` headers.
    pub quota: llamatap_policy::tenant::window::Quota,
    /// Session key from the configured session header.
    pub session: Option<u64>,
}

/// The current attempt's upstream.
#[derive(Default)]
pub struct AttemptState {
    /// Routing state: boxed, so that the per-connection future stays in its
    /// allocator size class (its size is paid for every held stream).
    pub routed: Box<Routed>,
    /// The fleet member of the current attempt (counted in its load).
    pub member: Option<usize>,
    /// Upstream attempts made (the first one and each retry).
    pub count: u32,
    /// The attempt's prompt progress events.
    pub progress: Progressing,
}

/// The current attempt's prompt progress (`return_progress`).
#[derive(Default)]
pub struct Progressing {
    /// The attempt's body asked llama-server for progress events.
    pub asked: bool,
    /// Reads (or strips) the answer's progress events until its first
    /// token.
    pub filter: Option<Box<llamatap_wire::progress::ProgressFilter>>,
}

/// What was seen of the answer and sent of it, until `logging` turns it
/// into a [`RequestRecord`].
pub struct Seen {
    /// Spans, when tracing is on. This and the other large, optional parts
    /// are boxed: the context lives inside each connection's future, whose
    /// size every held stream pays in full.
    pub span: Option<Box<RequestSpan>>,
    /// The `tracing` span log lines about this request are written in,
    /// bridged to the SERVER span (disabled when tracing is off).
    pub log_span: tracing::Span,
    /// Upstream response headers arrived.
    pub upstream_headers: Option<Instant>,
    /// Status sent downstream.
    pub status: Option<u16>,
    /// Observer of an event-stream body.
    pub observer: Option<Box<StreamObserver>>,
    /// Facts once the stream ended.
    pub stream_facts: Option<Box<StreamFacts>>,
    /// Bounded JSON response body, for non-streaming usage and timings.
    pub json_body: Option<Vec<u8>>,
    /// The counts of a JSON answer too large for `json_body`, read as it
    /// passes.
    pub json_counts: Option<Box<llamatap_wire::llama::CountScanner>>,
    /// Response body bytes forwarded.
    pub response_bytes: u64,
    /// The response is an event stream.
    pub streaming: bool,
    /// Response finished at.
    pub ended: Option<Instant>,
    /// Outcome override decided in an error hook.
    pub failure: Option<(Outcome, &'static str, String)>,
    /// Counted in `inflight_streams`.
    pub stream_counted: bool,
    /// The stream's terminal event has been written to the client.
    pub terminal_sent: bool,
}

/// What a continuable request keeps while its answer streams: its body,
/// and its continuations so far.
#[derive(Debug, Default)]
pub struct Resume {
    /// The request body as received (kept only when within
    /// `telemetry.max_inspect_bytes`).
    pub body: bytes::Bytes,
    /// Continuations so far (the telemetry's record of each).
    pub log: Vec<Continued>,
    /// Continuations done.
    pub count: u32,
    /// Pauses (pre-emptions) so far.
    pub pauses: u32,
    /// The continuation under way, until its attempt ends.
    pub open: Option<Box<Open>>,
}

/// A continuation under way: its record so far, and what the client gets
/// if it fails before its first token.
#[derive(Debug)]
pub struct Open {
    /// Its record (the target and the pause are filled in as it goes).
    pub entry: Continued,
    /// When the answer was cut.
    pub cut: Instant,
    /// What cut it: the client's error if the answer cannot go on.
    pub cause: Box<pingora::Error>,
    /// The target's first token reached the client.
    pub started: bool,
}

/// What routing keeps for a request across attempts.
#[derive(Debug, Default)]
pub struct Routed {
    /// The prompt's prefix chain, when the body was read before routing.
    pub chain: Chain,
    /// The chat prompt's digest, for the cache-break diagnosis in `logging`.
    pub prompt: Option<llamatap_policy::cachebreak::PromptDigest>,
    /// The routing decision of the current attempt.
    pub decision: Option<Decision>,
    /// Members already tried (connect failures).
    pub tried: Vec<usize>,
    /// The current attempt's member was ejected already (a failed connect,
    /// an unwell answer): `logging` does not eject it a second time.
    pub ejected: bool,
    /// Its TTFT objective and prediction ([`crate::ttft`]).
    pub ttft: crate::ttft::Plan,
    /// The current attempt's member, once its answer's body ended upstream
    /// and it was released from the member's load then
    /// ([`super::routing::answer_ended`]); `logging` does not release it
    /// again.
    pub freed: Option<std::sync::Arc<crate::fleet::Member>>,
}

impl RequestCtx {
    /// A new context for a request arriving now.
    pub fn new() -> Self {
        RequestCtx {
            asked: Asked {
                received: Instant::now(),
                received_wall: SystemTime::now(),
                route: Route::Other,
                body: Vec::new(),
                body_truncated: false,
                request: RequestFacts::default(),
                request_bytes: 0,
                continue_sent: false,
                started: false,
            },
            who: Who::default(),
            admission: None,
            attempt: AttemptState::default(),
            seen: Seen::default(),
            resume: None,
            conversation: None,
        }
    }

    /// The stream format, when the route streams.
    pub fn format(&self) -> Option<StreamFormat> {
        self.asked.route.stream_format()
    }

    /// Where a hang-up now would fall.
    pub fn hangup_phase(&self) -> HangupPhase {
        if self.admission.as_ref().is_some_and(|a| a.queued_now) {
            return HangupPhase::Queued;
        }
        let facts = self
            .seen
            .stream_facts
            .as_deref()
            .or_else(|| self.seen.observer.as_ref().map(|o| o.facts()));
        match (
            self.seen.upstream_headers,
            facts.and_then(|f| f.first_token_any),
        ) {
            (None, _) => HangupPhase::BeforeHeaders,
            (Some(_), None) => HangupPhase::Prefill,
            (Some(_), Some(_)) => HangupPhase::Decode,
        }
    }

    /// Builds the record, its strings bounded ([`RequestRecord::bound`]);
    /// `outcome` and error come from `logging`.
    pub fn record(
        &mut self,
        method: String,
        path: String,
        outcome: Outcome,
        error: Option<(&'static str, String)>,
        client_address: Option<String>,
    ) -> RequestRecord {
        let now = Instant::now();
        let end = self.seen.ended.unwrap_or(now);
        let hangup_phase = (outcome == Outcome::ClientHangup).then(|| self.hangup_phase());
        let facts = match (self.seen.stream_facts.take(), self.seen.observer.take()) {
            (Some(f), _) => *f,
            // Still observing: the body never ended (hang-up or failure).
            (None, Some(o)) => o.finish(end, StreamEnd::Cut),
            (None, None) => StreamFacts::default(),
        };
        let since =
            |t: Option<Instant>| t.map(|t| t.saturating_duration_since(self.asked.received));
        let mut rec = RequestRecord {
            route: self.asked.route,
            method,
            path,
            status: self.seen.status,
            outcome,
            error_type: error.as_ref().map(|e| e.0),
            error_message: error.map(|e| e.1),
            hangup_phase,
            request: std::mem::take(&mut self.asked.request),
            streamed: self.seen.streaming,
            received_wall: self.asked.received_wall,
            upstream_headers: since(self.seen.upstream_headers),
            first_token_any: since(facts.first_token_any),
            first_token: since(facts.first_token),
            first_sentence: since(facts.first_sentence),
            sentence_chars: facts.sentence_chars,
            sentence_text: facts.sentence_text,
            last_token: since(facts.last_token),
            end: end.saturating_duration_since(self.asked.received),
            response_model: facts.model,
            response_id: facts.response_id,
            finish_reasons: facts.finish_reasons,
            timings: facts.timings,
            usage: facts.usage,
            token_events: facts.token_events,
            max_token_gap: facts.max_token_gap,
            skipped_events: facts.skipped_events,
            response_bytes: self.seen.response_bytes,
            client_address,
            upstream: None,
            tenant: None,
            cache_break: None,
            continuations: self
                .resume
                .as_deref_mut()
                .map(|r| std::mem::take(&mut r.log))
                .unwrap_or_default(),
            conversation: self.conversation.as_deref().map(|c| ConversationFacts {
                usage: c.usage,
                replayed_bytes: match c.usage {
                    Use::Replay => self.seen.response_bytes,
                    _ => 0,
                },
                unsent_bytes: c.unsent_bytes,
                from_copy: c.from_copy,
            }),
            queue: self.admission.as_deref().map(|a| QueueFacts {
                class: a.class.as_str(),
                wait: a
                    .wait
                    .unwrap_or_else(|| now.saturating_duration_since(self.asked.received)),
                waited: a.waited,
            }),
            ttft: None,
        };
        if let (Some(body), Some(format)) =
            (self.seen.json_body.take(), self.asked.route.stream_format())
        {
            let r = llamatap_wire::llama::parse_response(format, &body);
            rec.finish_reasons = r.finish_reasons;
            rec.timings = r.timings;
            rec.usage = r.usage;
            rec.response_model = r.model;
            rec.response_id = r.response_id;
        } else if let (Some(counts), Some(format)) = (
            self.seen.json_counts.take(),
            self.asked.route.stream_format(),
        ) {
            let r = counts.finish(format);
            rec.timings = r.timings;
            rec.usage = r.usage;
            rec.response_model = r.model;
            rec.response_id = r.response_id;
        }
        rec.bound();
        rec
    }
}

impl Default for Seen {
    fn default() -> Self {
        Seen {
            span: None,
            log_span: tracing::Span::none(),
            upstream_headers: None,
            status: None,
            observer: None,
            stream_facts: None,
            json_body: None,
            json_counts: None,
            response_bytes: 0,
            streaming: false,
            ended: None,
            failure: None,
            stream_counted: false,
            terminal_sent: false,
        }
    }
}

impl Default for RequestCtx {
    fn default() -> Self {
        Self::new()
    }
}
