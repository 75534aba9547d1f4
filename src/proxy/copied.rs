//! A replay or stop whose member died or drained, answered from llamatap's
//! copy of the answer ([`llamatap_policy::conversation::copies`], kept by
//! [`crate::conversations`]):
//!
//! - a replay gets the bytes from `from` on, as llama-server would have
//!   replayed them; a copy of an answer that was cut (its member died or
//!   drained under it) goes on with its rest generated on another member
//!   ([`rest`]) when `[continuation]` is on, its request was kept with
//!   it, and no other replay is generating that rest now; otherwise it
//!   ends with an error event naming why, never `[DONE]`;
//! - a stop forgets the copy (`204`): nothing generates the answer any
//!   more.
//!
//! Deliberately not here: deciding that the member is gone
//! ([`crate::conversations::lost`]); generating the rest (the forwarding
//! loop's continuation).

mod rest;

use std::time::{Duration, Instant};

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use pingora::{Error, ErrorSource, ErrorType, Result};

use super::context::RequestCtx;
use super::{errors, Steps};
use llamatap_policy::conversation::copies::Copy;
use llamatap_policy::conversation::Use;
use llamatap_telemetry::record::Outcome;
use llamatap_wire::conversation::stream_from;

/// Longest wait writing the copy to the client.
const WRITE_LIMIT: Duration = Duration::from_secs(60);

/// Answers the request from the copy of its conversation's answer, when
/// one is kept; `false` when none is (`lost`: why its member cannot). An
/// error is the rest's that could not come (the client hears it as an
/// error event after the copy).
pub async fn serve(
    steps: &Steps,
    session: &mut Session,
    ctx: &mut RequestCtx,
    lost: &str,
) -> Result<bool> {
    let Some(claim) = ctx.conversation.as_deref() else {
        return Ok(false);
    };
    let conversations = &steps.conversations;
    let Some(copy) = conversations.copy(&claim.id) else {
        return Ok(false);
    };
    if claim.usage == Use::Stop {
        conversations.forget_copy(&claim.id);
        ctx.seen.status = Some(204);
        ctx.seen.ended = Some(Instant::now());
        if let Ok(resp) = ResponseHeader::build(204, Some(1)) {
            let ds = session.as_downstream_mut();
            let _ = ds.write_response_header(Box::new(resp)).await;
            let _ = ds.finish_body().await;
        }
        return Ok(true);
    }
    let Some(from) = stream_from(session.req_header().raw_path()) else {
        return Ok(false);
    };
    let why = match (&copy.kept, copy.complete) {
        (_, true) => None,
        _ if !steps.config.continuation.enabled => Some("continuation is off"),
        (None, _) => Some("its request was not kept (a route that is not continued, or a body over telemetry.max_inspect_bytes)"),
        (Some(kept), _) if conversations.take_rest(&claim.id) => {
            // The claim holds the rest from here: the replay's end gives
            // it back, with what it grew (`Conversations::finish`).
            let kept = kept.clone();
            let done = Box::pin(rest::serve(steps, session, ctx, &copy, &kept, from, lost)).await;
            return match done {
                Ok(()) => Ok(true),
                Err(e) if e.esource() == &ErrorSource::Downstream => Err(e),
                Err(e) if session.as_downstream().response_written().is_none() => Err(e),
                Err(_) => {
                    not_continued(session, ctx, lost).await;
                    Ok(true)
                }
            };
        }
        (Some(_), _) if conversations.rest_taken(&claim.id) => {
            Some("another replay is generating its rest now")
        }
        (Some(_), _) => Some("its rest could not be taken"),
    };
    if let Err(e) = replay(session, ctx, &copy, from, lost, why).await {
        ctx.seen.failure = Some((Outcome::ClientHangup, "client_hangup", e.to_string()));
    }
    Ok(true)
}

/// The rest of a cut copy could not come after the copy was sent: the
/// stream ends with the copy's error event, naming why (the continuation's
/// fixed word, as its record has it).
async fn not_continued(session: &mut Session, ctx: &mut RequestCtx, lost: &str) {
    let why = ctx
        .resume
        .as_deref()
        .and_then(|r| r.log.last())
        .and_then(|c| c.why)
        .unwrap_or("target_failed");
    let message =
        format!("{lost}; the answer was cut there, and its rest was not generated: {why}");
    let mid = ctx.seen.observer.as_ref().is_some_and(|o| o.mid_event());
    let event = errors::sse_error_event(&message, "upstream_error", "conversation_cut", mid);
    let ds = session.as_downstream_mut();
    let write = ds.write_response_body(Bytes::from(event), true);
    let _ = tokio::time::timeout(WRITE_LIMIT, write).await;
    ctx.seen.ended = Some(Instant::now());
    ctx.seen.failure = Some((Outcome::UpstreamError, "conversation_cut", message));
}

/// Writes `copy` from `from` on.
async fn replay(
    session: &mut Session,
    ctx: &mut RequestCtx,
    copy: &Copy,
    from: usize,
    lost: &str,
    why: Option<&str>,
) -> Result<()> {
    let rest = copy.bytes.get(from..).unwrap_or(&[]);
    let mut body = rest.to_vec();
    if !copy.complete {
        let why = why.map(|w| format!(", and its rest was not generated: {w}"));
        let message = format!(
            "{lost}; the answer was cut there, and this is all of it that was kept{}",
            why.unwrap_or_default()
        );
        let mid = !copy.bytes.ends_with(b"\n\n");
        body.extend_from_slice(&errors::sse_error_event(
            &message,
            "upstream_error",
            "conversation_cut",
            mid,
        ));
        ctx.seen.failure = Some((Outcome::UpstreamError, "conversation_cut", message));
    }
    let mut resp = ResponseHeader::build(200, Some(4))?;
    resp.insert_header("Content-Type", "text/event-stream")?;
    resp.insert_header("Cache-Control", "no-cache")?;
    resp.insert_header("X-Accel-Buffering", "no")?;
    resp.insert_header("Content-Length", body.len().to_string())?;
    ctx.seen.status = Some(200);
    ctx.seen.streaming = true;
    ctx.seen.response_bytes = rest.len() as u64;
    if let Some(c) = ctx.conversation.as_deref_mut() {
        c.from_copy = true;
    }
    let ds = session.as_downstream_mut();
    let write = async {
        ds.write_response_header(Box::new(resp)).await?;
        ds.write_response_body(Bytes::from(body), true).await
    };
    let done = tokio::time::timeout(WRITE_LIMIT, write).await;
    ctx.seen.ended = Some(Instant::now());
    match done {
        Ok(r) => r.map_err(|e| e.into_down()),
        Err(_) => Err(
            Error::explain(ErrorType::WriteTimedout, "writing a replay from the copy").into_down(),
        ),
    }
}
