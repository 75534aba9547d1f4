//! The OTLP metrics (OpenTelemetry GenAI semantic conventions, the version
//! [`sc::SEMCONV_VERSION`] names): an aggregation of llamatap's own, fed by
//! the same per-request recording as the Prometheus families
//! ([`super::metrics::Metrics::record`]), read by the periodic exporter
//! ([`super::metric_export`]).
//!
//! Cumulative temporality, explicit-bucket histograms with the conventions'
//! advised boundaries (time to first token stretched past 10 s), one
//! exemplar per bucket (the latest sampled request's trace and span).
//! Series are keyed by the GenAI attributes, whose values come from bounded
//! sets (operation, model labels, error types, the fleet's members), and
//! capped at [`MAX_SERIES`]: further attribute sets go to one overflow series
//! (`otel.metric.overflow=true`), as OpenTelemetry SDKs do.
//!
//! Deliberately not here: the wire encoding (`encode`), sending (the
//! exporter), and any work when OTLP metrics are off (recording returns at
//! once). Pure: no I/O, no clock but the record's own wall time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::record::{Outcome, RequestRecord};
use crate::semconv as sc;

pub mod encode;
mod histogram;
#[cfg(test)]
mod tests;

pub use histogram::{Exemplar, Histogram, SpanRef};

/// Most attribute sets held; one more is the overflow series.
pub const MAX_SERIES: usize = 512;

/// `gen_ai.server.request.duration` boundaries, seconds (the conventions').
pub const REQUEST_DURATION_BUCKETS: &[f64] = &[
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

/// `gen_ai.server.time_to_first_token` boundaries, seconds: the
/// conventions' (up to 10 s), stretched to a minute (15, 20, 30, 45, 60 s)
/// so that long prompts do not all land above the last bound. Also the
/// first sentence's and the queue wait's.
pub const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    15.0, 20.0, 30.0, 45.0, 60.0,
];

/// `gen_ai.server.time_per_output_token` boundaries, seconds (the conventions').
pub const TPOT_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
];

/// `gen_ai.client.token.usage` boundaries, tokens (the conventions': powers of 4).
pub const TOKEN_BUCKETS: &[f64] = &[
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];

/// One instrument: its name, unit, description and boundaries.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Instrument {
    /// The metric name.
    pub name: &'static str,
    /// Its unit (UCUM).
    pub unit: &'static str,
    /// What it measures.
    pub description: &'static str,
    /// The explicit bucket boundaries.
    pub bounds: &'static [f64],
}

/// Index of each instrument's histogram in a [`Series`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `gen_ai.server.request.duration`.
    RequestDuration,
    /// `gen_ai.server.time_to_first_token`.
    TimeToFirstToken,
    /// `gen_ai.server.time_per_output_token`.
    TimePerOutputToken,
    /// `gen_ai.client.token.usage`, `gen_ai.token.type=input`.
    InputTokens,
    /// `gen_ai.client.token.usage`, `gen_ai.token.type=output`.
    OutputTokens,
    /// `llamatap.server.time_to_first_sentence`.
    TimeToFirstSentence,
    /// `llamatap.server.queue.duration`.
    QueueDuration,
}

impl Kind {
    /// Every kind, in export order.
    pub const ALL: [Kind; 7] = [
        Kind::RequestDuration,
        Kind::TimeToFirstToken,
        Kind::TimePerOutputToken,
        Kind::InputTokens,
        Kind::OutputTokens,
        Kind::TimeToFirstSentence,
        Kind::QueueDuration,
    ];

    /// The instrument it is a part of.
    pub fn instrument(self) -> Instrument {
        let (name, unit, description, bounds) = match self {
            Kind::RequestDuration => (
                sc::GEN_AI_SERVER_REQUEST_DURATION,
                sc::UNIT_SECONDS,
                "Time from the request's arrival at llamatap to the end of its answer (or its failure)",
                REQUEST_DURATION_BUCKETS,
            ),
            Kind::TimeToFirstToken => (
                sc::GEN_AI_SERVER_TIME_TO_FIRST_TOKEN,
                sc::UNIT_SECONDS,
                "Time from the request's arrival to its first visible content token",
                TTFT_BUCKETS,
            ),
            Kind::TimePerOutputToken => (
                sc::GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN,
                sc::UNIT_SECONDS,
                "Per answer: (last token - first token) / (output tokens - 1)",
                TPOT_BUCKETS,
            ),
            Kind::InputTokens | Kind::OutputTokens => (
                sc::GEN_AI_CLIENT_TOKEN_USAGE,
                sc::UNIT_TOKENS,
                "Tokens per request: input (all prompt tokens, cached included) and output",
                TOKEN_BUCKETS,
            ),
            Kind::TimeToFirstSentence => (
                sc::LLAMATAP_SERVER_TIME_TO_FIRST_SENTENCE,
                sc::UNIT_SECONDS,
                "Time from the request's arrival to the end of the first sentence of visible text",
                TTFT_BUCKETS,
            ),
            Kind::QueueDuration => (
                sc::LLAMATAP_SERVER_QUEUE_DURATION,
                sc::UNIT_SECONDS,
                "Time a request waited in llamatap's admission queue (arrival to dispatch)",
                TTFT_BUCKETS,
            ),
        };
        Instrument {
            name,
            unit,
            description,
            bounds,
        }
    }

    /// `gen_ai.token.type`, for the token kinds.
    pub fn token_type(self) -> Option<&'static str> {
        match self {
            Kind::InputTokens => Some(sc::TOKEN_TYPE_INPUT),
            Kind::OutputTokens => Some(sc::TOKEN_TYPE_OUTPUT),
            _ => None,
        }
    }
}

/// The attributes of one series (besides `gen_ai.provider.name`, always
/// `llama.cpp`, and `gen_ai.token.type`, per kind).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SeriesKey {
    /// `gen_ai.operation.name`.
    pub operation: &'static str,
    /// `gen_ai.request.model`: the request's model as a bounded label.
    pub request_model: Option<String>,
    /// `gen_ai.response.model`: the answer's model as a bounded label.
    pub response_model: Option<String>,
    /// `error.type`, on failures only.
    pub error_type: Option<&'static str>,
    /// `server.address`.
    pub server_address: String,
    /// `server.port`.
    pub server_port: u16,
    /// The overflow series (every other field empty).
    pub overflow: bool,
}

/// The histograms of one attribute set, each made at its first value.
#[derive(Clone, Debug)]
pub struct Series {
    /// When the series started, nanoseconds since the Unix epoch.
    pub start_unix_nano: u64,
    histograms: [Option<Histogram>; Kind::ALL.len()],
}

impl Series {
    fn new(start_unix_nano: u64) -> Series {
        Series {
            start_unix_nano,
            histograms: Default::default(),
        }
    }

    fn observe(&mut self, kind: Kind, value: f64, exemplar: Option<(SpanRef, u64)>) {
        if let Some(slot) = self.histograms.get_mut(kind as usize) {
            slot.get_or_insert_with(|| Histogram::new(kind.instrument().bounds))
                .observe(value, exemplar);
        }
    }

    /// The histogram of `kind`, once it has a value.
    pub fn histogram(&self, kind: Kind) -> Option<&Histogram> {
        self.histograms.get(kind as usize).and_then(Option::as_ref)
    }
}

/// The model labels of one request, bounded ([`crate::models::ModelNames`]).
#[derive(Clone, Debug, Default)]
pub struct RequestModels {
    /// The request's model, as a label; `None` when it named none.
    pub request: Option<String>,
    /// The answer's model, as a label; `None` when it named none.
    pub response: Option<String>,
}

/// The OTLP metrics' state: every series, behind one short lock taken once
/// per request.
#[derive(Debug, Default)]
pub struct GenAiMetrics {
    enabled: bool,
    default_server: (String, u16),
    series: Mutex<HashMap<SeriesKey, Series>>,
}

/// Nanoseconds since the Unix epoch (0 before it).
pub fn unix_nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// `error.type` of a request: none when it succeeded; else its error code
/// (a fixed word of the proxy's), else its outcome label; `_OTHER` for a
/// value that is not a plain lower-case word.
pub fn error_type(rec: &RequestRecord) -> Option<&'static str> {
    if rec.outcome == Outcome::Ok {
        return None;
    }
    let t = rec.error_type.unwrap_or(rec.outcome.as_str());
    let plain = !t.is_empty()
        && t.len() <= 64
        && t.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    Some(if plain { t } else { sc::ERROR_TYPE_OTHER })
}

impl GenAiMetrics {
    /// Records nothing until [`GenAiMetrics::enable`]: OTLP metrics are off.
    pub fn new() -> GenAiMetrics {
        GenAiMetrics::default()
    }

    /// Turns recording on; a request never routed is attributed to
    /// `default_server` (`server.address`, `server.port`), as its span is.
    pub fn enable(&mut self, default_server: (&str, u16)) {
        self.enabled = true;
        self.default_server = (default_server.0.to_string(), default_server.1);
    }

    /// Whether recording is on.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Records one finished request of a GenAI route (other routes are not
    /// GenAI operations and are left out): its duration, time to first
    /// token, time per output token, tokens, first sentence and queue wait,
    /// the same values the Prometheus families take. `span` is the sampled
    /// request's SERVER span, for exemplars.
    pub fn record(&self, rec: &RequestRecord, models: &RequestModels, span: Option<SpanRef>) {
        if !self.enabled {
            return;
        }
        let Some(operation) = rec.route.operation_name() else {
            return;
        };
        let (address, port) = match &rec.upstream {
            Some(u) => (u.host.as_str(), u.port),
            None => (self.default_server.0.as_str(), self.default_server.1),
        };
        let key = SeriesKey {
            operation,
            request_model: models.request.clone(),
            response_model: models.response.clone(),
            error_type: error_type(rec),
            server_address: address.to_string(),
            server_port: port,
            overflow: false,
        };
        let at = |d: Duration| unix_nanos(rec.received_wall + d);
        let answered = rec.answered();
        let mut values: Vec<(Kind, f64, u64)> = Vec::with_capacity(Kind::ALL.len());
        values.push((Kind::RequestDuration, rec.end.as_secs_f64(), at(rec.end)));
        if let Some(d) = rec.first_token {
            values.push((Kind::TimeToFirstToken, d.as_secs_f64(), at(d)));
        }
        if let Some(t) = rec.time_per_output_token().filter(|_| answered) {
            let end = rec.last_token.unwrap_or(rec.end);
            values.push((Kind::TimePerOutputToken, t.as_secs_f64(), at(end)));
        }
        for (kind, n) in [
            (Kind::InputTokens, rec.input_tokens()),
            (Kind::OutputTokens, rec.output_tokens()),
        ] {
            if let Some(n) = n {
                values.push((kind, n as f64, at(rec.end)));
            }
        }
        if let Some(d) = rec.first_sentence {
            values.push((Kind::TimeToFirstSentence, d.as_secs_f64(), at(d)));
        }
        if let Some(q) = &rec.queue {
            values.push((Kind::QueueDuration, q.wait.as_secs_f64(), at(q.wait)));
        }
        let Ok(mut all) = self.series.lock() else {
            return;
        };
        let key = if all.contains_key(&key) || all.len() < MAX_SERIES {
            key
        } else {
            SeriesKey {
                overflow: true,
                ..SeriesKey::default()
            }
        };
        let series = all
            .entry(key)
            .or_insert_with(|| Series::new(unix_nanos(rec.received_wall)));
        for (kind, value, moment) in values {
            series.observe(kind, value, span.map(|s| (s, moment)));
        }
    }

    /// Forgets every series of a model label no upstream serves any more
    /// (as the Prometheus series are removed).
    pub fn remove_model(&self, model: &str) {
        if let Ok(mut all) = self.series.lock() {
            all.retain(|k, _| {
                k.request_model.as_deref() != Some(model)
                    && k.response_model.as_deref() != Some(model)
            });
        }
    }

    /// A copy of every series, for one export (taken under the lock, encoded
    /// outside it).
    pub fn snapshot(&self) -> Vec<(SeriesKey, Series)> {
        self.series
            .lock()
            .map(|all| all.iter().map(|(k, s)| (k.clone(), s.clone())).collect())
            .unwrap_or_default()
    }
}
