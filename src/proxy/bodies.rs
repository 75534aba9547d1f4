//! What the hooks keep of each body as it passes, without changing a byte:
//! the request body's bounded copy (read for its facts and the prompt's
//! digest at its end), the kind of answer (an event stream gets an
//! observer, a JSON answer a bounded copy for its usage, or past
//! `telemetry.max_inspect_bytes` a [`CountScanner`] that keeps only its
//! counts), and each answer chunk handed to the observer.
//!
//! Deliberately not here: reading the events (the observer,
//! `llamatap_telemetry::observe`) and forwarding ([`super::forward`]).

use std::time::Instant;

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::Result;

use super::cachebreak::{self, Breaks};
use super::charge;
use super::context::RequestCtx;
use super::errors;
use crate::config::Config;
use llamatap_telemetry::observe::{StreamEnd, StreamObserver};
use llamatap_telemetry::Telemetry;
use llamatap_wire::llama::CountScanner;
use llamatap_wire::request;

/// A request body chunk: counted against `limits.max_body_bytes`, and kept
/// (up to `telemetry.max_inspect_bytes`) for the body's facts, read once
/// the body is whole.
pub fn request_chunk(
    ctx: &mut RequestCtx,
    body: Option<&Bytes>,
    end_of_stream: bool,
    config: &Config,
    breaks: &Breaks,
) -> Result<()> {
    if let Some(b) = body {
        ctx.asked.request_bytes += b.len() as u64;
        if ctx.asked.request_bytes > config.max_body_bytes {
            return Err(errors::too_large());
        }
    }
    if ctx.asked.route.operation_name().is_none() {
        return Ok(());
    }
    if let Some(b) = body {
        let limit = config.telemetry.max_inspect_bytes;
        if !ctx.asked.body_truncated && ctx.asked.body.len() + b.len() <= limit {
            ctx.asked.body.extend_from_slice(b);
        } else {
            ctx.asked.body_truncated = true;
            ctx.asked.body = Vec::new();
        }
    }
    if end_of_stream && !ctx.asked.body_truncated && !ctx.asked.body.is_empty() {
        if ctx.attempt.routed.prompt.is_none() {
            // One parse gives the facts and the prompt's digest.
            let capture = breaks.capture();
            let (facts, prompt) = cachebreak::inspect(ctx.asked.route, &ctx.asked.body, capture);
            ctx.asked.request = facts;
            ctx.attempt.routed.prompt = prompt;
        } else {
            ctx.asked.request = request::inspect_body(&ctx.asked.body);
        }
        if charge::refuses(ctx) {
            // Refused before the last chunk goes out: llama-server never
            // has the whole body.
            return Err(errors::counts_hidden());
        }
        let mut body = std::mem::take(&mut ctx.asked.body);
        body.shrink_to_fit();
        let body = Bytes::from(body);
        super::continuable::keep_body(ctx, config.continuation.enabled, body);
    }
    Ok(())
}

/// The answer's head arrived: an event stream gets an observer, a JSON
/// answer a bounded copy (for its usage); anything else is only counted.
pub fn watch(ctx: &mut RequestCtx, resp: &ResponseHeader, config: &Config, telemetry: &Telemetry) {
    let format = ctx.format();
    ctx.seen.json_counts = None;
    if is_event_stream(resp) {
        ctx.seen.streaming = true;
        ctx.seen.stream_counted = true;
        telemetry.stream_active(true);
        ctx.seen.observer = observer(ctx, config);
    } else if format.is_some() && is_json(resp) {
        ctx.seen.json_body = Some(Vec::new());
    }
}

/// A replay about to generate the rest of a cut copy
/// ([`super::copied`]): its answer is an event stream whose observer,
/// keeping its transcript, has read the whole `copy`, as if its client
/// had heard it all.
pub fn watch_copy(ctx: &mut RequestCtx, copy: &[u8], config: &Config, telemetry: &Telemetry) {
    ctx.seen.streaming = true;
    ctx.seen.stream_counted = true;
    telemetry.stream_active(true);
    ctx.seen.observer = observer(ctx, config).map(|mut o| {
        o.on_chunk(copy, Instant::now());
        o
    });
}

/// An observer for the request's event stream, keeping the transcript a
/// continuation reads when the body was kept for one.
fn observer(ctx: &RequestCtx, config: &Config) -> Option<Box<StreamObserver>> {
    let t = &config.telemetry;
    let mut observer = Box::new(StreamObserver::new(
        ctx.format()?,
        t.max_event_bytes,
        t.capture_content,
    ));
    if ctx.resume.is_some() {
        let ids = super::continuable::transcript_ids(ctx);
        observer.keep_transcript(t.max_inspect_bytes, ids);
    }
    Some(observer)
}

/// An answer chunk: counted, handed to the observer (or to the JSON copy);
/// at the end, the observer's facts are kept.
pub fn response_chunk(
    ctx: &mut RequestCtx,
    body: Option<&Bytes>,
    end_of_stream: bool,
    config: &Config,
) {
    let now = Instant::now();
    if let Some(b) = body {
        ctx.seen.response_bytes += b.len() as u64;
        if let Some(o) = ctx.seen.observer.as_mut() {
            o.on_chunk(b, now);
        } else if let Some(j) = ctx.seen.json_body.as_mut() {
            if j.len() + b.len() <= config.telemetry.max_inspect_bytes {
                j.extend_from_slice(b);
            } else {
                // Too large to keep: only its counts are read, as it passes.
                let mut counts = Box::new(CountScanner::new());
                counts.feed(j);
                counts.feed(b);
                ctx.seen.json_counts = Some(counts);
                ctx.seen.json_body = None;
            }
        } else if let Some(c) = ctx.seen.json_counts.as_mut() {
            c.feed(b);
        }
    }
    if end_of_stream {
        ctx.seen.ended = Some(now);
        if let Some(o) = ctx.seen.observer.take() {
            ctx.seen.stream_facts = Some(Box::new(o.finish(now, StreamEnd::Complete)));
        }
    }
}

fn is_event_stream(resp: &ResponseHeader) -> bool {
    resp.headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}

fn is_json(resp: &ResponseHeader) -> bool {
    resp.headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("json"))
}
