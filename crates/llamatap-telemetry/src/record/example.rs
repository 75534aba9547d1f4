//! One finished request to start tests and benchmarks from: a streamed chat
//! completion that went well through upstream `a`, after a short queue wait.
//! Callers change what their case is about with struct update syntax
//! (`RequestRecord { status: Some(502), ..RequestRecord::example() }`).
//!
//! Built only for this crate's tests and with the `example` feature (the
//! root crate's dev-dependency turns it on for its benchmarks); the proxy
//! never builds a record this way.

use std::time::{Duration, SystemTime};

use llamatap_wire::llama::Usage;
use llamatap_wire::request::{RequestFacts, Route};

use super::{Outcome, QueueFacts, RequestRecord, UpstreamFacts};

impl RequestRecord {
    /// A streamed chat completion answered 200 by model `tiny` at
    /// 2023-11-14T22:13:20Z: headers after 2 ms, first token 30 ms, first
    /// sentence (10 chars) 90 ms, last token 300 ms, end 310 ms; 20 input and
    /// 10 output tokens in 10 token events, the longest gap 40 ms; upstream
    /// `a` at 10.0.0.1:8081 chosen by `round_robin` (`only`); class `default`
    /// after a 3 ms wait; no tenant, no cache break, no continuation.
    pub fn example() -> RequestRecord {
        RequestRecord {
            route: Route::ChatCompletions,
            method: "POST".into(),
            path: "/v1/chat/completions".into(),
            status: Some(200),
            outcome: Outcome::Ok,
            error_type: None,
            error_message: None,
            hangup_phase: None,
            request: RequestFacts::default(),
            streamed: true,
            received_wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            upstream_headers: Some(Duration::from_millis(2)),
            first_token_any: Some(Duration::from_millis(30)),
            first_token: Some(Duration::from_millis(30)),
            first_sentence: Some(Duration::from_millis(90)),
            sentence_chars: Some(10),
            sentence_text: None,
            last_token: Some(Duration::from_millis(300)),
            end: Duration::from_millis(310),
            response_model: Some("tiny".into()),
            response_id: None,
            finish_reasons: vec![],
            timings: None,
            usage: Some(Usage {
                input_tokens: Some(20),
                output_tokens: Some(10),
                ..Default::default()
            }),
            token_events: 10,
            max_token_gap: Some(Duration::from_millis(40)),
            skipped_events: 0,
            response_bytes: 100,
            client_address: None,
            upstream: Some(UpstreamFacts {
                name: "a".into(),
                host: "10.0.0.1".into(),
                port: 8081,
                policy: "round_robin",
                reason: "only",
                failovers: 0,
                predicted_cached_tokens: None,
                prediction: None,
            }),
            tenant: None,
            cache_break: None,
            conversation: None,
            queue: Some(QueueFacts {
                class: "default",
                wait: Duration::from_millis(3),
                waited: true,
            }),
            continuations: Vec::new(),
            ttft: None,
        }
    }
}
