//! The last N finished requests, for the admin latency page. Bounded memory:
//! a ring of at most `capacity` entries, each a fixed set of numbers and short
//! strings (never prompt or completion text).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use crate::record::RequestRecord;

/// One request as the latency page draws it.
#[derive(Clone, Debug)]
pub struct RecentRequest {
    /// Wall-clock arrival.
    pub received: SystemTime,
    /// Model label.
    pub model: String,
    /// Route label.
    pub route: &'static str,
    /// Outcome label.
    pub outcome: &'static str,
    /// Status sent, if any.
    pub status: Option<u16>,
    /// Whether it streamed.
    pub streamed: bool,
    /// Moments from arrival: upstream headers, first token (any), first token, first sentence, last token, end.
    pub upstream_headers: Option<Duration>,
    /// First token on any channel.
    pub first_token_any: Option<Duration>,
    /// First visible token.
    pub first_token: Option<Duration>,
    /// First sentence.
    pub first_sentence: Option<Duration>,
    /// Last token.
    pub last_token: Option<Duration>,
    /// End.
    pub end: Duration,
    /// llama-server prefill time.
    pub prefill: Option<Duration>,
    /// llama-server decode time.
    pub decode: Option<Duration>,
    /// Prompt tokens (all) and cached ones.
    pub input_tokens: Option<u64>,
    /// Cached prompt tokens.
    pub cached_tokens: Option<u64>,
    /// Output tokens.
    pub output_tokens: Option<u64>,
    /// Trace id (hex), when tracing is on.
    pub trace_id: Option<String>,
    /// The upstream that answered (its configured name), when routed.
    pub upstream: Option<String>,
    /// Why that upstream was chosen.
    pub route_reason: Option<&'static str>,
    /// The cache-break diagnosis: cause, and where (message index, field,
    /// offset), and prompt tokens recomputed (never text).
    pub cache_break: Option<BreakMark>,
    /// Time in the admission queue, when it waited there.
    pub queued: Option<Duration>,
    /// The tenant's name; `None`: the shared anonymous tenant.
    pub tenant: Option<std::sync::Arc<str>>,
    /// Its class in the admission queue, when the queue took it.
    pub class: Option<&'static str>,
    /// Each continuation of the answer (at most
    /// [`crate::continuation::MAX_KEPT`]).
    pub continuations: Vec<ContinuationMark>,
    /// Where the predicted first token fell, from arrival (dispatch plus
    /// the prediction), when one was made and the request was dispatched.
    pub predicted_first_token: Option<Duration>,
    /// Where the first token was predicted to fall after the answer's last
    /// prompt progress event, from arrival (dispatch plus the corrected
    /// prediction).
    pub corrected_first_token: Option<Duration>,
}

/// A continuation as the page marks it: when (from arrival), why, how it
/// went, and the client's pause.
pub type ContinuationMark = (Duration, &'static str, &'static str, Duration);

/// A cache break as the page marks it: cause, where (message index, field,
/// offset) and prompt tokens recomputed.
pub type BreakMark = (&'static str, Option<(usize, &'static str, usize)>, u64);

impl RecentRequest {
    /// Summarises a record.
    pub fn from_record(rec: &RequestRecord, model: String, trace_id: Option<String>) -> Self {
        RecentRequest {
            received: rec.received_wall,
            model,
            route: rec.route.as_str(),
            outcome: rec.outcome.as_str(),
            status: rec.status,
            streamed: rec.streamed,
            upstream_headers: rec.upstream_headers,
            first_token_any: rec.first_token_any,
            first_token: rec.first_token,
            first_sentence: rec.first_sentence,
            last_token: rec.last_token,
            end: rec.end,
            prefill: rec.timings.and_then(|t| t.prefill()),
            decode: rec.timings.and_then(|t| t.decode()),
            input_tokens: rec.input_tokens(),
            cached_tokens: rec.cached_input_tokens(),
            output_tokens: rec.output_tokens(),
            trace_id,
            upstream: rec.upstream.as_ref().map(|u| u.name.clone()),
            route_reason: rec.upstream.as_ref().map(|u| u.reason),
            cache_break: rec.cache_break.as_ref().map(|d| {
                (
                    d.cause.as_str(),
                    d.position
                        .as_ref()
                        .map(|p| (p.message_index, p.field.as_str(), p.offset)),
                    d.recomputed_tokens,
                )
            }),
            queued: rec.queue.filter(|q| q.waited).map(|q| q.wait),
            tenant: rec.tenant.clone(),
            class: rec.queue.map(|q| q.class),
            continuations: rec
                .continuations
                .iter()
                .map(|c| (c.at, c.reason.as_str(), c.result.as_str(), c.pause))
                .collect(),
            predicted_first_token: rec.ttft.and_then(|t| {
                let ms = t.predicted_ms?;
                Some(t.dispatched? + Duration::from_millis(ms))
            }),
            corrected_first_token: rec.ttft.and_then(|t| {
                let ms = t.corrected_ms?;
                Some(t.dispatched? + Duration::from_millis(ms))
            }),
        }
    }
}

/// A bounded ring of recent requests.
#[derive(Debug)]
pub struct RecentRequests {
    capacity: usize,
    ring: Mutex<VecDeque<RecentRequest>>,
}

impl RecentRequests {
    /// An empty ring holding at most `capacity`.
    pub fn new(capacity: usize) -> Self {
        RecentRequests {
            capacity,
            ring: Mutex::new(VecDeque::with_capacity(capacity)),
        }
    }

    /// Adds one, dropping the oldest when full.
    pub fn push(&self, r: RecentRequest) {
        if let Ok(mut g) = self.ring.lock() {
            if g.len() >= self.capacity {
                g.pop_front();
            }
            g.push_back(r);
        }
    }

    /// A copy, oldest first.
    pub fn snapshot(&self) -> Vec<RecentRequest> {
        self.ring
            .lock()
            .map(|g| g.iter().cloned().collect())
            .unwrap_or_default()
    }
}
