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
//! Deliberately not here: the instruments' names, units and boundaries
//! (`instrument`), the wire encoding (`encode`), sending (the
//! exporter), and any work when OTLP metrics are off (recording returns at
//! once). Pure: no I/O, no clock but the record's own wall time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::record::{Outcome, RequestRecord};
use crate::semconv as sc;

pub mod encode;
mod histogram;
mod instrument;
#[cfg(test)]
mod tests;

pub use histogram::{Exemplar, Histogram, SpanRef};
pub use instrument::*;

/// Most attribute sets held; one more is the overflow series.
pub const MAX_SERIES: usize = 512;

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
