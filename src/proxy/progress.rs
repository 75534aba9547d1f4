//! Prompt progress events (`[ttft] prompt_progress`): llama-server is asked
//! for them on streamed generating requests, they correct the TTFT
//! prediction during the prefill, and the client gets them only if it
//! asked for them itself.
//!
//! - [`may_ask`] and [`shape`] (an attempt's request): a `POST` to chat
//!   completions, completions, `/completion` or `/infill` (where
//!   llama-server's progress events are separate events: on
//!   `/v1/responses` a progress event also carries the stream's
//!   `response.in_progress`, so stripping it would change the client's
//!   stream, and `/v1/messages` sends none), with a `Content-Length`
//!   within `telemetry.max_inspect_bytes`, and without `X-Conversation-Id`
//!   (llama-server keeps that stream for replays, which would replay the
//!   events), is read whole; a JSON object with `"stream": true` whose
//!   client did not ask itself gets `"return_progress":true` first
//!   ([`llamatap_wire::progress::ask_whole`]) and its `Content-Length`
//!   grown. Any other body goes unchanged.
//! - [`watch`] (the answer's head): an event stream of an attempt that
//!   asked gets a [`ProgressFilter`], which strips the events unless the
//!   client's own body said `"return_progress": true`.
//! - [`filter`] (each answer chunk, before anything else sees it): the
//!   chunk without the progress events, each event correcting the
//!   prediction ([`crate::ttft::Predictor::correct`]). The filter goes once
//!   the first token was seen and no byte is held: nothing runs per chunk
//!   after it.
//!
//! Every chunk read from llama-server, progress events included, restarts
//! the forwarding loop's read timeout: a prefill that sends progress
//! events is alive.
//!
//! Deliberately not here: the events' bytes (the wire crate's
//! [`llamatap_wire::progress`]), the correction's arithmetic (the policy
//! crate's `TtftBook::correct`).

use std::time::Instant;

use bytes::Bytes;
use http::header;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::Result;

use super::context::RequestCtx;
use super::predict;
use crate::config::Config;
use crate::ttft::{round_ms, Predictor};
use llamatap_policy::ttft::Progress;
use llamatap_wire::progress::{ask_whole, ProgressFilter, PromptProgress};
use llamatap_wire::request::Route;

/// Largest progress event held back while incomplete; a longer event is
/// no progress event (llama-server's are about 300 bytes).
const MAX_EVENT_BYTES: usize = 16 << 10;

/// Whether this attempt's body may ask for progress events (its route and
/// framing allow it; whether it does is [`shape`]'s, once it is whole).
/// What an earlier attempt asked and read is forgotten.
pub fn may_ask(config: &Config, ctx: &mut RequestCtx, req: &RequestHeader) -> bool {
    forget(ctx);
    let length = req
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok());
    config.ttft.prompt_progress
        && matches!(
            ctx.asked.route,
            Route::ChatCompletions | Route::Completions | Route::Completion | Route::Infill
        )
        && req.method == http::Method::POST
        && ctx.conversation.is_none()
        && !req.headers.contains_key(header::TRANSFER_ENCODING)
        && length.is_some_and(|n| n > 0 && n <= config.telemetry.max_inspect_bytes)
}

/// The whole `body` of an attempt that may ask: a streamed request whose
/// client did not ask itself gets the member (`Some`, the head's
/// `Content-Length` set to it); a client that asked itself is only noted
/// (its events will be read and passed); anything else goes unchanged
/// (`None`), a body that is not a JSON object among them.
pub fn shape(
    ctx: &mut RequestCtx,
    req: &mut RequestHeader,
    body: &[u8],
) -> Result<Option<Vec<u8>>> {
    let facts = &ctx.asked.request;
    if facts.return_progress {
        ctx.attempt.progress.asked = facts.stream == Some(true);
        return Ok(None);
    }
    if facts.stream != Some(true) {
        return Ok(None);
    }
    let Some(asked) = ask_whole(body) else {
        return Ok(None);
    };
    req.insert_header(header::CONTENT_LENGTH, asked.len().to_string())?;
    ctx.attempt.progress.asked = true;
    Ok(Some(asked))
}

/// A new attempt: what an earlier one asked and read is forgotten (a
/// continuation's own `/completion` never asks).
pub fn forget(ctx: &mut RequestCtx) {
    ctx.attempt.progress = Default::default();
    ctx.attempt.routed.ttft.corrected_ms = None;
    ctx.attempt.routed.ttft.progress_events = 0;
    ctx.attempt.routed.ttft.slot_started = None;
}

/// The answer's head: an event stream of an attempt that asked gets its
/// filter (stripping unless the client asked itself). A stripped stream is
/// sent chunked: its length is no longer llama-server's.
pub fn watch(predictor: &Predictor, ctx: &mut RequestCtx, resp: &mut ResponseHeader) {
    let events = resp
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        });
    if !ctx.attempt.progress.asked || !events {
        // Its body is whole now (its `max_tokens` known); no progress will
        // say when its prefill ends: counted as done, as a request whose
        // progress is unknown.
        predict::described(predictor, ctx, false);
        predict::prefilling(predictor, ctx, 0);
        return;
    }
    let strip = !ctx.asked.request.return_progress;
    if strip {
        resp.remove_header(&header::CONTENT_LENGTH);
    }
    ctx.attempt.progress.filter = Some(Box::new(ProgressFilter::new(strip, MAX_EVENT_BYTES)));
}

/// An answer chunk through the filter, when there is one: what the client
/// gets of it (`None` when there is nothing, at the end), each progress
/// event correcting the prediction.
pub fn filter(
    predictor: &Predictor,
    ctx: &mut RequestCtx,
    chunk: Option<Bytes>,
    end: bool,
) -> Option<Bytes> {
    let Some(f) = ctx.attempt.progress.filter.as_deref_mut() else {
        return chunk;
    };
    // Progress comes before the first token (which ended the prefill on
    // the board, [`first_token`]): past it, the filter goes.
    let tokens = ctx
        .seen
        .observer
        .as_ref()
        .is_some_and(|o| o.facts().token_events > 0);
    if tokens && f.is_idle() {
        ctx.attempt.progress.filter = None;
        first_token(predictor, ctx);
        return chunk;
    }
    let now = Instant::now();
    let plan = &mut ctx.attempt.routed.ttft;
    let mut out = Vec::new();
    let mut read = |p: PromptProgress| {
        plan.progress_events = plan.progress_events.saturating_add(1);
        plan.slot_started.get_or_insert(now);
        let left = p.total.saturating_sub(p.processed);
        // The first event is sent as the slot starts its prefill.
        let beside = plan.flight.map_or(0, |b| {
            let tokens = p.total.saturating_sub(p.cache);
            predictor
                .flights
                .progressed(b, now, (tokens, left, p.processed))
        });
        let Some(predicted) = plan.predicted.as_ref() else {
            return;
        };
        let progress = Progress {
            total: p.total,
            cache: p.cache,
            processed: p.processed,
            time_ms: p.time_ms,
        };
        if let Some(ms) = predictor
            .correct(predicted, &progress, (now, beside))
            .ttft_ms()
        {
            plan.corrected_ms = Some(round_ms(ms));
            if let Some(b) = plan.flight.filter(|_| predictor.flights.promised()) {
                predictor.flights.expect(b, ms);
            }
        }
    };
    if let Some(b) = chunk.as_ref() {
        f.feed(b, &mut out, &mut read);
    }
    if end {
        f.finish(&mut out, &mut read);
    }
    if !f.strips() {
        return chunk;
    }
    if chunk.is_none() && out.is_empty() {
        return None;
    }
    Some(Bytes::from(out))
}

/// The attempt's first token went through: its prefill is over (on the
/// board of answers in flight, for the predictions beside it and the
/// prompts its batches carried).
pub fn first_token(predictor: &Predictor, ctx: &RequestCtx) {
    if let Some(b) = ctx.attempt.routed.ttft.flight {
        predictor.flights.prefilled(b, Instant::now());
    }
}
