//! What a request's spans say, from its [`RequestRecord`]: the SERVER span's
//! attributes (HTTP, GenAI, usage, timings) and its events, each at its real
//! moment (arrival wall time plus monotonic offsets).
//!
//! Deliberately not here: starting and ending spans, and export (the parent
//! module); the cache-break event ([`super::super::cachebreak`]).

use std::time::{Duration, SystemTime};

use opentelemetry::trace::Span as _;
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::Span;

use super::super::semconv as sc;
use super::Tracing;
use crate::record::{Outcome, RequestRecord};

impl Tracing {
    /// `server.address` and `server.port`: the upstream that answered, or
    /// the first configured one when the request was not routed.
    pub(super) fn server(&self, rec: &RequestRecord) -> (String, i64) {
        match &rec.upstream {
            Some(u) => (u.host.clone(), i64::from(u.port)),
            None => (self.server_address.clone(), self.server_port),
        }
    }

    /// The SERVER span's attributes, from the record.
    pub(super) fn attributes(&self, rec: &RequestRecord) -> Vec<KeyValue> {
        let (address, port) = self.server(rec);
        let mut v = vec![
            KeyValue::new(sc::HTTP_REQUEST_METHOD, rec.method.clone()),
            KeyValue::new(sc::URL_PATH, rec.path.clone()),
            KeyValue::new(sc::URL_SCHEME, "http"),
            KeyValue::new(sc::HTTP_ROUTE, rec.route.as_str()),
            KeyValue::new(sc::LLAMATAP_ROUTE, rec.route.as_str()),
            KeyValue::new(sc::LLAMATAP_OUTCOME, rec.outcome.as_str()),
            KeyValue::new(sc::SERVER_ADDRESS, address),
            KeyValue::new(sc::SERVER_PORT, port),
        ];
        if let Some(u) = &rec.upstream {
            v.push(KeyValue::new(sc::LLAMATAP_UPSTREAM, u.name.clone()));
            v.push(KeyValue::new(sc::LLAMATAP_ROUTE_POLICY, u.policy));
            v.push(KeyValue::new(sc::LLAMATAP_ROUTE_REASON, u.reason));
            v.push(KeyValue::new(
                sc::LLAMATAP_ROUTE_FAILOVERS,
                i64::from(u.failovers),
            ));
            if let Some(t) = u.predicted_cached_tokens {
                v.push(KeyValue::new(
                    sc::LLAMATAP_ROUTE_PREDICTED_CACHED_TOKENS,
                    i64::try_from(t).unwrap_or(i64::MAX),
                ));
            }
            if let Some(p) = u.prediction {
                v.push(KeyValue::new(sc::LLAMATAP_ROUTE_PREDICTION, p));
            }
        }
        if let Some(t) = &rec.ttft {
            v.push(KeyValue::new(sc::LLAMATAP_TTFT_CONFIDENCE, t.confidence));
            if let Some(ms) = t.predicted_ms {
                let ms = i64::try_from(ms).unwrap_or(i64::MAX);
                v.push(KeyValue::new(sc::LLAMATAP_TTFT_PREDICTED_MS, ms));
            }
            if let Some(ms) = t.slo_ms {
                v.push(KeyValue::new(sc::LLAMATAP_TTFT_SLO_MS, i64::from(ms)));
            }
            if let Some(ms) = t.corrected_ms {
                let ms = i64::try_from(ms).unwrap_or(i64::MAX);
                v.push(KeyValue::new(sc::LLAMATAP_TTFT_CORRECTED_MS, ms));
            }
            if t.made_room {
                v.push(KeyValue::new(sc::LLAMATAP_TTFT_MADE_ROOM, true));
            }
            if t.probe {
                v.push(KeyValue::new(sc::LLAMATAP_TTFT_PROBE, true));
            }
            if let Some(us) = t.floor_us {
                v.push(KeyValue::new(
                    sc::LLAMATAP_TTFT_FLOOR_MS,
                    us as f64 / 1000.0,
                ));
            }
            if let Some(ms) = t.held_ms {
                let ms = i64::try_from(ms).unwrap_or(i64::MAX);
                v.push(KeyValue::new(sc::LLAMATAP_TTFT_HELD_MS, ms));
            }
            if let Some(ms) = t.sequenced_ms {
                let ms = i64::try_from(ms).unwrap_or(i64::MAX);
                v.push(KeyValue::new(sc::LLAMATAP_TTFT_SEQUENCED_MS, ms));
            }
            if let Some(n) = t.prefill_beside_tokens {
                let n = i64::from(n);
                v.push(KeyValue::new(sc::LLAMATAP_TTFT_PREFILL_BESIDE_TOKENS, n));
            }
            if let Some(ms) = t.predicted_wait_ms {
                let ms = i64::try_from(ms).unwrap_or(i64::MAX);
                v.push(KeyValue::new(sc::LLAMATAP_TTFT_PREDICTED_WAIT_MS, ms));
            }
            if let Some(ms) = t.slot_started_ms {
                let ms = i64::try_from(ms).unwrap_or(i64::MAX);
                v.push(KeyValue::new(sc::LLAMATAP_TTFT_SLOT_STARTED_MS, ms));
            }
            if t.progress_events > 0 {
                let n = i64::from(t.progress_events);
                v.push(KeyValue::new(sc::LLAMATAP_TTFT_PROGRESS_EVENTS, n));
            }
        }
        let mut put = |k: &'static str, val: Option<Value>| {
            if let Some(val) = val {
                v.push(KeyValue::new(k, val));
            }
        };
        let int = |n: Option<u64>| n.map(|n| Value::I64(i64::try_from(n).unwrap_or(i64::MAX)));
        put(
            sc::CLIENT_ADDRESS,
            rec.client_address.clone().map(Value::from),
        );
        put(
            sc::HTTP_RESPONSE_STATUS_CODE,
            rec.status.map(|s| Value::I64(i64::from(s))),
        );
        put(sc::ERROR_TYPE, rec.error_type.map(Value::from));
        if let Some(op) = rec.route.operation_name() {
            put(sc::GEN_AI_OPERATION_NAME, Some(op.into()));
            put(
                sc::GEN_AI_PROVIDER_NAME,
                Some(sc::PROVIDER_LLAMA_CPP.into()),
            );
            put(
                sc::GEN_AI_REQUEST_STREAM,
                Some(Value::Bool(rec.request.stream.unwrap_or(false))),
            );
        }
        put(
            sc::GEN_AI_REQUEST_MODEL,
            rec.request.model.clone().map(Value::from),
        );
        put(sc::GEN_AI_REQUEST_MAX_TOKENS, int(rec.request.max_tokens));
        put(
            sc::GEN_AI_REQUEST_TEMPERATURE,
            rec.request.temperature.map(Value::F64),
        );
        put(sc::GEN_AI_REQUEST_TOP_P, rec.request.top_p.map(Value::F64));
        put(sc::GEN_AI_REQUEST_SEED, rec.request.seed.map(Value::I64));
        put(
            sc::GEN_AI_RESPONSE_MODEL,
            rec.response_model.clone().map(Value::from),
        );
        put(
            sc::GEN_AI_RESPONSE_ID,
            rec.response_id.clone().map(Value::from),
        );
        if !rec.finish_reasons.is_empty() {
            let arr: Vec<opentelemetry::StringValue> = rec
                .finish_reasons
                .iter()
                .map(|r| r.clone().into())
                .collect();
            put(
                sc::GEN_AI_RESPONSE_FINISH_REASONS,
                Some(Value::Array(arr.into())),
            );
        }
        put(
            sc::GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK,
            rec.first_token_any.map(|d| Value::F64(d.as_secs_f64())),
        );
        put(sc::GEN_AI_USAGE_INPUT_TOKENS, int(rec.input_tokens()));
        put(
            sc::GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
            int(rec.cached_input_tokens()),
        );
        put(sc::GEN_AI_USAGE_OUTPUT_TOKENS, int(rec.output_tokens()));
        put(
            sc::GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
            int(rec.usage.and_then(|u| u.reasoning_tokens)),
        );
        if let Some(t) = &rec.timings {
            put(sc::LLAMA_PROMPT_N, int(t.prompt_n));
            put(sc::LLAMA_PROMPT_MS, t.prompt_ms.map(Value::F64));
            put(sc::LLAMA_PREDICTED_N, int(t.predicted_n));
            put(sc::LLAMA_PREDICTED_MS, t.predicted_ms.map(Value::F64));
            put(sc::LLAMA_CACHE_N, int(t.cache_n));
        }
        if rec.streamed {
            put(sc::LLAMATAP_TOKEN_EVENTS, int(Some(rec.token_events)));
            put(
                sc::LLAMATAP_MAX_TOKEN_GAP,
                rec.max_token_gap.map(|d| Value::F64(d.as_secs_f64())),
            );
        }
        if rec.skipped_events > 0 {
            put(sc::LLAMATAP_SKIPPED_EVENTS, int(Some(rec.skipped_events)));
        }
        super::super::cachebreak::attributes(rec, &mut v);
        v
    }
}

/// The SERVER span's events (first token, first sentence, last token, a
/// hang-up or an upstream error), each at its real moment.
pub(super) fn add_events(
    s: &mut Span,
    rec: &RequestRecord,
    at: &dyn Fn(Duration) -> SystemTime,
    capture: bool,
) {
    if let (Some(any), first) = (rec.first_token_any, rec.first_token) {
        if first != Some(any) {
            s.add_event_with_timestamp(sc::EVENT_FIRST_TOKEN_ANY, at(any), vec![]);
        }
    }
    if let Some(t) = rec.first_token {
        s.add_event_with_timestamp(sc::EVENT_FIRST_TOKEN, at(t), vec![]);
    }
    if let Some(t) = rec.first_sentence {
        let mut attrs = vec![KeyValue::new(
            sc::SENTENCE_CHARS,
            i64::try_from(rec.sentence_chars.unwrap_or(0)).unwrap_or(i64::MAX),
        )];
        if capture {
            if let Some(text) = &rec.sentence_text {
                attrs.push(KeyValue::new(sc::SENTENCE_TEXT, text.clone()));
            }
        }
        s.add_event_with_timestamp(sc::EVENT_FIRST_SENTENCE, at(t), attrs);
    }
    if let Some(t) = rec.last_token {
        s.add_event_with_timestamp(sc::EVENT_LAST_TOKEN, at(t), vec![]);
    }
    match rec.outcome {
        Outcome::ClientHangup => {
            let phase = rec
                .hangup_phase
                .map(|p| p.as_str())
                .unwrap_or("before_headers");
            s.add_event_with_timestamp(
                sc::EVENT_CLIENT_HANGUP,
                at(rec.end),
                vec![KeyValue::new(sc::HANGUP_PHASE, phase)],
            );
        }
        Outcome::UpstreamError => {
            let mut attrs = vec![];
            if let Some(t) = rec.error_type {
                attrs.push(KeyValue::new(sc::ERROR_TYPE, t));
            }
            if let Some(m) = &rec.error_message {
                attrs.push(KeyValue::new(sc::ERROR_MESSAGE, m.clone()));
            }
            s.add_event_with_timestamp(sc::EVENT_UPSTREAM_ERROR, at(rec.end), attrs);
        }
        _ => {}
    }
}
