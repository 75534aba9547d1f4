//! The cache-break diagnosis ([`llamatap_policy::cachebreak`]) as telemetry: span
//! attributes and the `cache_break` event, and the counters by cause.
//!
//! The `cause` label takes its values from the fixed list
//! [`Cause::ALL`], every one seeded at zero at start, so no request can mint
//! a series. Text (the excerpts at a break) goes only on the span's event,
//! and only with content capture on; never on a metric.

use std::time::{Duration, SystemTime};

use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::Span;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::semconv as sc;
use crate::record::RequestRecord;
use llamatap_policy::cachebreak::{Cause, Diagnosis};

/// `{cause}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabels {
    /// [`Cause::as_str`].
    pub cause: &'static str,
}

/// Seconds counted as `f64`.
type Seconds = Counter<f64, std::sync::atomic::AtomicU64>;

/// The cache-break families.
#[derive(Clone, Default)]
pub struct CacheBreakMetrics {
    /// `llamatap_prefill_recomputed_requests_total{cause}`.
    pub requests: Family<CauseLabels, Counter>,
    /// `llamatap_prefill_recomputed_tokens_total{cause}`.
    pub tokens: Family<CauseLabels, Counter>,
    /// `llamatap_prefill_recomputed_seconds_total{cause}`.
    pub seconds: Family<CauseLabels, Seconds>,
}

impl CacheBreakMetrics {
    /// Creates the families, registers them in `r` and seeds every cause at zero.
    pub fn register(r: &mut Registry) -> Self {
        let m = CacheBreakMetrics::default();
        r.register(
            "llamatap_prefill_recomputed_requests",
            "Chat turns judged against their conversation's previous turn, by cause (reused: nothing recomputed that the previous turn covered)",
            m.requests.clone(),
        );
        r.register(
            "llamatap_prefill_recomputed_tokens",
            "Prompt tokens recomputed that the previous turn's prompt covered, by cause",
            m.tokens.clone(),
        );
        r.register(
            "llamatap_prefill_recomputed_seconds",
            "Prefill seconds spent on those recomputed tokens (llama-server's prompt_ms per token), by cause",
            m.seconds.clone(),
        );
        for cause in Cause::ALL {
            let l = CauseLabels {
                cause: cause.as_str(),
            };
            let _ = m.requests.get_or_create(&l);
            let _ = m.tokens.get_or_create(&l);
            let _ = m.seconds.get_or_create(&l);
        }
        m
    }

    /// Counts a judged request.
    pub fn record(&self, rec: &RequestRecord) {
        let Some(d) = &rec.cache_break else {
            return;
        };
        let l = CauseLabels {
            cause: d.cause.as_str(),
        };
        self.requests.get_or_create(&l).inc();
        self.tokens.get_or_create(&l).inc_by(d.recomputed_tokens);
        if d.recomputed_ms.is_finite() && d.recomputed_ms > 0.0 {
            self.seconds
                .get_or_create(&l)
                .inc_by(d.recomputed_ms / 1000.0);
        }
    }
}

/// The diagnosis's span attributes (pushed onto `v`).
pub fn attributes(rec: &RequestRecord, v: &mut Vec<KeyValue>) {
    let Some(d) = &rec.cache_break else {
        return;
    };
    v.extend(common(d));
}

fn common(d: &Diagnosis) -> Vec<KeyValue> {
    let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let mut v = vec![
        KeyValue::new(sc::LLAMATAP_CACHE_BREAK_CAUSE, d.cause.as_str()),
        KeyValue::new(
            sc::LLAMATAP_CACHE_BREAK_RECOMPUTED_TOKENS,
            int(d.recomputed_tokens),
        ),
        KeyValue::new(sc::LLAMATAP_CACHE_BREAK_RECOMPUTED_MS, d.recomputed_ms),
    ];
    if let Some(p) = &d.position {
        v.push(KeyValue::new(
            sc::LLAMATAP_CACHE_BREAK_MESSAGE_INDEX,
            int(p.message_index as u64),
        ));
        v.push(KeyValue::new(
            sc::LLAMATAP_CACHE_BREAK_FIELD,
            p.field.as_str(),
        ));
        v.push(KeyValue::new(
            sc::LLAMATAP_CACHE_BREAK_OFFSET,
            int(p.offset as u64),
        ));
    }
    v
}

/// The `cache_break` event, at the first token (when the prefill was over),
/// for a turn whose cause is a break; with `capture`, the excerpts too.
pub fn add_event(
    s: &mut Span,
    rec: &RequestRecord,
    at: &dyn Fn(Duration) -> SystemTime,
    capture: bool,
) {
    use opentelemetry::trace::Span as _;
    let Some(d) = rec.cache_break.as_ref().filter(|d| d.cause.is_break()) else {
        return;
    };
    let mut attrs = common(d);
    if capture {
        for (k, t) in [
            (sc::LLAMATAP_CACHE_BREAK_OLD_TEXT, &d.old_excerpt),
            (sc::LLAMATAP_CACHE_BREAK_NEW_TEXT, &d.new_excerpt),
        ] {
            if let Some(t) = t {
                attrs.push(KeyValue::new(k, t.clone()));
            }
        }
    }
    let when = rec
        .first_token_any
        .or(rec.upstream_headers)
        .unwrap_or(rec.end);
    s.add_event_with_timestamp(sc::EVENT_CACHE_BREAK, at(when), attrs);
}
