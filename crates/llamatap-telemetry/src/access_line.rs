//! The access log's line: one JSON object per finished request, built from
//! its [`RequestRecord`], for an operator to grep by time, client, path,
//! status, model or trace id.
//!
//! Pure: no framework, no I/O (the writer lives in
//! [`crate::access_log`]). A line holds no prompt or completion text,
//! never a header, and only strings with a bound: the path is
//! [`RequestRecord::bound`]'s (1,024 bytes), the method 256 bytes, the model
//! is the bounded metric label, the upstream and the tenant configured names, and the
//! rest are fixed labels, numbers and hex ids. `cache_break` is the
//! cache-break diagnosis of a chat turn (cause, position, cost; never the
//! excerpts), `null` when the turn was not judged. `continuations` lists
//! the cuts of a chat stream by its upstream (reason, result, target
//! upstream, tokens before, pause), empty for nearly every request.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::record::RequestRecord;

#[cfg(test)]
mod tests;

/// The trace and SERVER span a line belongs to, hex.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpanIds {
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
}

/// One access-log line; absent facts are `null`, so every line has every field.
#[derive(Debug, Serialize)]
struct Line<'a> {
    time: String,
    client: Option<&'a str>,
    method: &'a str,
    path: &'a str,
    status: Option<u16>,
    route: &'static str,
    model: &'a str,
    outcome: &'static str,
    error_type: Option<&'static str>,
    upstream: Option<&'a str>,
    tenant: &'a str,
    priority: Option<&'static str>,
    queued_ms: Option<f64>,
    ttft_ms: Option<f64>,
    predicted_ttft_ms: Option<u64>,
    corrected_ttft_ms: Option<u64>,
    ttft_slo_ms: Option<u32>,
    ttft_held_ms: Option<u64>,
    ttft_sequenced_ms: Option<u64>,
    ttft_probe: Option<bool>,
    ttft_floor_ms: Option<f64>,
    ttft_prefill_beside_tokens: Option<u32>,
    ttft_predicted_wait_ms: Option<u64>,
    ttft_slot_started_ms: Option<u64>,
    first_sentence_ms: Option<f64>,
    e2e_ms: f64,
    prompt_tokens: Option<u64>,
    cached_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    trace_id: Option<&'a str>,
    span_id: Option<&'a str>,
    cache_break: Option<CacheBreak>,
    continuations: Vec<Continuation<'a>>,
    conversation: Option<Conversation>,
}

/// What the request did with a resumable stream (never its id).
#[derive(Debug, Serialize)]
struct Conversation {
    #[serde(rename = "use")]
    usage: &'static str,
    replayed_bytes: u64,
    unsent_bytes: u64,
    from_copy: bool,
}

/// One cut of the answer by its upstream (never its text).
#[derive(Debug, Serialize)]
struct Continuation<'a> {
    reason: &'static str,
    result: &'static str,
    from: Option<&'a str>,
    to: Option<&'a str>,
    tokens_before: u64,
    generated_tokens: Option<u64>,
    pause_ms: f64,
}

/// The cache-break diagnosis of a chat turn (never its text).
#[derive(Debug, Serialize)]
struct CacheBreak {
    cause: &'static str,
    message_index: Option<usize>,
    field: Option<&'static str>,
    offset: Option<usize>,
    recomputed_tokens: u64,
    recomputed_ms: f64,
}

/// The JSON line (with its `\n`) for a finished request, labelled with the
/// bounded `model` label, and the ids of its span when tracing is on.
pub fn line(rec: &RequestRecord, model: &str, ids: Option<&SpanIds>) -> String {
    let l = Line {
        time: rfc3339(rec.received_wall),
        client: rec.client_address.as_deref(),
        method: &rec.method,
        path: &rec.path,
        status: rec.status,
        route: rec.route.as_str(),
        model,
        outcome: rec.outcome.as_str(),
        error_type: rec.error_type,
        upstream: rec.upstream.as_ref().map(|u| u.name.as_str()),
        tenant: rec.tenant(),
        priority: rec.queue.map(|q| q.class),
        queued_ms: rec.queue.map(|q| ms(q.wait)),
        ttft_ms: rec.first_token.map(ms),
        predicted_ttft_ms: rec.ttft.and_then(|t| t.predicted_ms),
        corrected_ttft_ms: rec.ttft.and_then(|t| t.corrected_ms),
        ttft_slo_ms: rec.ttft.and_then(|t| t.slo_ms),
        ttft_held_ms: rec.ttft.and_then(|t| t.held_ms),
        ttft_sequenced_ms: rec.ttft.and_then(|t| t.sequenced_ms),
        ttft_probe: rec.ttft.map(|t| t.probe),
        ttft_floor_ms: rec.ttft.and_then(|t| t.floor_us).map(us_as_ms),
        ttft_prefill_beside_tokens: rec.ttft.and_then(|t| t.prefill_beside_tokens),
        ttft_predicted_wait_ms: rec.ttft.and_then(|t| t.predicted_wait_ms),
        ttft_slot_started_ms: rec.ttft.and_then(|t| t.slot_started_ms),
        first_sentence_ms: rec.first_sentence.map(ms),
        e2e_ms: ms(rec.end),
        prompt_tokens: rec.input_tokens(),
        cached_tokens: rec.cached_input_tokens(),
        completion_tokens: rec.output_tokens(),
        trace_id: ids.map(|i| i.trace_id.as_str()),
        span_id: ids.map(|i| i.span_id.as_str()),
        cache_break: rec.cache_break.as_ref().map(|d| CacheBreak {
            cause: d.cause.as_str(),
            message_index: d.position.as_ref().map(|p| p.message_index),
            field: d.position.as_ref().map(|p| p.field.as_str()),
            offset: d.position.as_ref().map(|p| p.offset),
            recomputed_tokens: d.recomputed_tokens,
            recomputed_ms: (d.recomputed_ms * 1000.0).round() / 1000.0,
        }),
        conversation: rec.conversation.map(|c| Conversation {
            usage: c.usage.as_str(),
            replayed_bytes: c.replayed_bytes,
            unsent_bytes: c.unsent_bytes,
            from_copy: c.from_copy,
        }),
        continuations: rec
            .continuations
            .iter()
            .map(|c| Continuation {
                reason: c.reason.as_str(),
                result: c.result.as_str(),
                from: c.from.as_deref(),
                to: c.to.as_deref(),
                tokens_before: c.tokens_before,
                generated_tokens: c.generated,
                pause_ms: ms(c.pause),
            })
            .collect(),
    };
    let mut out = serde_json::to_string(&l).unwrap_or_default();
    out.push('\n');
    out
}

/// Milliseconds, rounded to the microsecond.
fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1_000_000.0).round() / 1000.0
}

/// Whole microseconds as milliseconds.
fn us_as_ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// `t` as RFC 3339 in UTC with milliseconds, e.g. `2026-12-01T03:52:56.123Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_millis()
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    // Eras of 400 years (146,097 days) starting on 0000-03-01.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y,
        u32::try_from(m).unwrap_or(1),
        u32::try_from(d).unwrap_or(1),
    )
}
