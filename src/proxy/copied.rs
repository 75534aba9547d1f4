//! A replay or stop whose member died or drained, answered from llamatap's
//! copy of the answer ([`llamatap_policy::conversation::copies`], kept by
//! [`crate::conversations`]):
//!
//! - a replay gets the bytes from `from` on, as llama-server would have
//!   replayed them; a copy of an answer that was cut (its member died
//!   under it) ends with an error event naming why, never `[DONE]`;
//! - a stop forgets the copy (`204`): nothing generates the answer any
//!   more.
//!
//! Deliberately not here: deciding that the member is gone
//! ([`crate::conversations::lost`]); continuing a cut copy on another
//! member (not built: the copy ends with the error event).

use std::time::{Duration, Instant};

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use pingora::{Error, ErrorType, Result};

use super::context::RequestCtx;
use super::{errors, Steps};
use llamatap_policy::conversation::copies::Copy;
use llamatap_policy::conversation::Use;
use llamatap_telemetry::record::Outcome;
use llamatap_wire::conversation::stream_from;

/// Longest wait writing the copy to the client.
const WRITE_LIMIT: Duration = Duration::from_secs(60);

/// Answers the request from the copy of its conversation's answer, when
/// one is kept; `false` when none is (`lost`: why its member cannot).
pub async fn serve(steps: &Steps, session: &mut Session, ctx: &mut RequestCtx, lost: &str) -> bool {
    let Some(claim) = ctx.conversation.as_deref() else {
        return false;
    };
    let conversations = &steps.conversations;
    let Some(copy) = conversations.copy(&claim.id) else {
        return false;
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
        return true;
    }
    let Some(from) = stream_from(session.req_header().raw_path()) else {
        return false;
    };
    if let Err(e) = replay(session, ctx, &copy, from, lost).await {
        ctx.seen.failure = Some((Outcome::ClientHangup, "client_hangup", e.to_string()));
    }
    true
}

/// Writes `copy` from `from` on.
async fn replay(
    session: &mut Session,
    ctx: &mut RequestCtx,
    copy: &Copy,
    from: usize,
    lost: &str,
) -> Result<()> {
    let rest = copy.bytes.get(from..).unwrap_or(&[]);
    let mut body = rest.to_vec();
    if !copy.complete {
        let message =
            format!("{lost}; the answer was cut there, and this is all of it that was kept");
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
